"""A pytest plugin that makes one engine function slower, to prove the regression gate.

    pytest --benchmark-only -p llmbench.bench.inject --slow-down decode_step=0.15 ...

Every call to `llmbench.engine.loop.<name>` then takes (1 + factor) times as long: the real call
runs, the device is synced, and the same time times `factor` is slept on top. The slowdown
so scales with the model and the machine instead of being a fixed delay that a slow machine
would hide. Benchmark modules import engine functions by name at collection, which happens
after this plugin's configure hook, so they see the slowed function too. The run's JSON
records what was injected (`llmbench_injected`), so such a run is never mistaken for a real
one. A speedup cannot be injected; slow the baseline instead.
"""

from __future__ import annotations

import argparse
import functools
import time

import pytest
import torch

from llmbench.engine import loop as engine
from llmbench.engine.timing import Stopwatch

INJECT_KEY = pytest.StashKey[dict]()


def parse_slowdown(text: str) -> tuple[str, float]:
    """'decode_step=0.15' -> ('decode_step', 0.15)."""
    name, sep, factor = text.partition("=")
    try:
        value = float(factor)
    except ValueError:
        value = None
    if not sep or value is None or not value > 0:
        raise argparse.ArgumentTypeError(f"expected FUNCTION=FACTOR with FACTOR > 0, e.g. "
                                         f"decode_step=0.15, got {text!r}")
    if not callable(getattr(engine, name, None)):
        raise argparse.ArgumentTypeError(f"llmbench.engine.loop has no function {name!r}")
    return name, value


def slowed(function, factor: float):
    """`function`, taking (1 + factor) times as long."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        device = getattr(args[0], "device", None) if args else None
        # A call that is given no device (model or tensor) first does host work only.
        watch = Stopwatch(device if isinstance(device, torch.device) else "cpu")
        out = function(*args, **kwargs)
        time.sleep(factor * watch.elapsed())
        return out

    return wrapper


def pytest_addoption(parser: pytest.Parser) -> None:
    """--slow-down, only when this plugin is loaded with -p llmbench.bench.inject."""
    group = parser.getgroup("llmbench")
    group.addoption("--slow-down", action="append", default=[], type=parse_slowdown,
                    metavar="FUNCTION=FACTOR",
                    help="(llmbench.bench.inject) make llmbench.engine.loop.FUNCTION take "
                         "1 + FACTOR times as long; repeatable. Default: %(default)r")


def pytest_configure(config: pytest.Config) -> None:
    """Patch the engine before collection imports the benchmark modules."""
    injected = dict(config.getoption("slow_down"))
    if not injected:
        raise pytest.UsageError("-p llmbench.bench.inject needs --slow-down FUNCTION=FACTOR")
    originals = {name: getattr(engine, name) for name in injected}
    for name, factor in injected.items():
        setattr(engine, name, slowed(originals[name], factor))
    config.stash[INJECT_KEY] = originals
    config.add_cleanup(lambda: [setattr(engine, n, f) for n, f in originals.items()])


def pytest_benchmark_update_json(config: pytest.Config, benchmarks, output_json: dict) -> None:
    """Mark the saved run, so a run with an injected slowdown is never taken for a real one."""
    output_json["llmbench_injected"] = {"slow_down": dict(config.getoption("slow_down"))}
