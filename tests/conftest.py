"""Shared fixtures for the library's tests: models loaded once per xdist worker.

Run with `pytest -n auto --dist loadgroup tests/` (as `nox -s tests` does): tests marked with
one `xdist_group` then share a worker, one after another. Each worker pins torch to one CPU
thread: xdist already runs one worker per core, and torch's default of one thread per core
on top of that oversubscribes the CPU and makes every forward pass several times slower.

A test that needs a CPU feature says so with `@pytest.mark.needs_cpu(cpu_features.X)` and is
skipped, with the reason, where this CPU lacks it (`llmbench.engine.cpu_features` decides, as
it does for the engine and the suite). `--hide-cpu-feature KEY` makes the whole run believe
the CPU lacks a feature it has (torch's probes for it answer no), so one machine can show what
a machine without it runs.

The suites and A/Bs these tests start run beside the other xdist workers, so every round they
time is disturbed by other work: `$LLMBENCH_DISTURBED_SHARE` is set to 100% for them (unless
already set), and the tests of disturbed rounds pass their own `--disturbed-share`. Their
assertions therefore hold whatever the timings (a 10x planted slowdown, a 200% threshold).
A test whose assertion rests on real timings at a real threshold (an A/A that must pass) is
marked `alone`: beside another worker a co-runner multiplies one side's rounds and the
verdict is the co-runner's, so under xdist it is skipped with the reason, and `nox -s tests`
runs the `alone` tests afterwards by themselves (`pytest -m alone tests`).
"""

from __future__ import annotations

import os

import pairing_clock
import postgres
import pytest
import torch

from llmbench.engine import cpu_features, disturbance
from llmbench.engine.config import EngineConfig
from llmbench.engine.models import LoadedModel, load_model

os.environ.setdefault(disturbance.SHARE_ENV, "100%")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--hide-cpu-feature", action="append", default=[], metavar="KEY",
                     choices=sorted(cpu_features.FEATURES),
                     help="run as if this CPU lacked the feature (repeatable); choices: "
                          f"{', '.join(sorted(cpu_features.FEATURES))}")


class _AnswersNo:
    """A torch probe that answers no and is otherwise the one it replaces: torch walks its op
    namespaces and expects every op there to keep its overloads (`.default`)."""

    def __init__(self, probe):
        self._probe = probe

    def __call__(self, *args, **kwargs) -> bool:
        return False

    def __getattr__(self, name: str):
        return getattr(self._probe, name)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs_cpu(feature): skipped, with the reason, where "
                                       "this CPU lacks the llmbench.engine.cpu_features feature")
    config.addinivalue_line("markers", "alone: asserts a verdict drawn from real timings; "
                                       "skipped under xdist, run by itself with -m alone")
    # Hidden where torch answers, as a CPU without the feature would answer: the engine and
    # the suite see it missing, and a test that replaces a probe itself still decides it.
    for key in config.getoption("hide_cpu_feature"):
        for probe in cpu_features.FEATURES[key].probes:
            if hasattr(probe.owner, probe.name):
                setattr(probe.owner, probe.name, _AnswersNo(getattr(probe.owner, probe.name)))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("alone") and os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("times real processes and asserts their verdict, which a co-running "
                    "xdist worker would decide: run it alone (pytest -m alone tests)")
    for mark in item.iter_markers("needs_cpu"):
        why = cpu_features.missing(*mark.args)
        if why is not None:
            pytest.skip(why)


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_lm() -> LoadedModel:
    """The seeded random-weight tiny Llama (SmolLM2's tokenizer), on CPU in float32."""
    return load_model(EngineConfig(model="tiny", device="cpu"))


@pytest.fixture(scope="module")
def tiny_server(tiny_lm: LoadedModel):
    """A real uvicorn server for the tiny model on a free loopback port: its URL."""
    from llmbench.serve.app import ServerSettings, create_app, running_server

    with running_server(create_app(tiny_lm, ServerSettings(max_new_tokens_cap=64))) as url:
        yield url


@pytest.fixture(scope="session")
def smollm2_lm() -> LoadedModel:
    """The real SmolLM2-135M-Instruct weights (de-quantized once into ~/.cache/llmbench)."""
    return load_model(EngineConfig(model="smollm2-135m", device="cpu"))


@pytest.fixture(scope="session")
def gpt2_lm() -> LoadedModel:
    """distilgpt2's shapes with random weights: the non-Llama (GPT-2) code path."""
    return load_model(EngineConfig(model="distilgpt2@random", device="cpu"))


@pytest.fixture(params=["tiny", "smollm2"])
def any_lm(request) -> LoadedModel:
    """Each of tiny and the real smollm2-135m, for the agreement tests."""
    return request.getfixturevalue(f"{request.param}_lm")



@pytest.fixture
def clock(monkeypatch):
    """The pairing coordinator's clock, faked (`pairing_clock`)."""
    return pairing_clock.install(monkeypatch)


@pytest.fixture(scope="session")
def pg_server() -> postgres.Server:
    """A PostgreSQL server of this worker's own (`postgres`), for the database store's tests;
    skipped where none can start, unless $LLMBENCH_REQUIRE_POSTGRES (CI) makes that a
    failure."""
    why = postgres.missing()
    if why is not None:
        if os.environ.get(postgres.REQUIRE_ENV):
            pytest.fail(f"{postgres.REQUIRE_ENV} is set: {why}")
        pytest.skip(why)
    return postgres.server()
