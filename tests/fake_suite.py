"""A throwaway git repository holding a fake benchmark suite, for the tests of what runs
suites side by side (paired A/B, bisect) without the cost of a model.

Its one benchmark sleeps `llmbench.SPEED` centiseconds per round through pytest-benchmark's
own `benchmark.pedantic`, so a commit that changes SPEED in the fake `llmbench/__init__.py`
changes the benchmark's speed; its conftest saves the run in llmbench's format, and every
round appends (side, pid, start, end, speed) to the file $FAKE_TRACE names.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

FAKE_CONFTEST = '''
import json, os, subprocess, time
from pathlib import Path

import pytest

ENV = {"model": "fake", "device": "cpu", "device_name": "x", "dtype": "float32",
       "threads": 1, "fingerprint": {"name": "fake"}, "versions": {}}


def pytest_addoption(parser):
    parser.addoption("--baseline-dir")
    parser.addoption("--model", default="fake")
    # What the real suite takes to set what it measures (`llmbench bisect --change-point`
    # passes a history's settings on); the fake suite measures the same whatever they say.
    for name in ("--device", "--dtype", "--threads", "--attn", "--cache", "--weights"):
        parser.addoption(name)
    parser.addoption("--compile", action="store_true")


@pytest.fixture(scope="session", autouse=True)
def model():
    """Stands for loading and warming a model: FAKE_LOAD_S seconds, traced."""
    start = time.monotonic()
    time.sleep(float(os.environ.get("FAKE_LOAD_S", "0")))
    with open(os.environ["FAKE_TRACE"] + ".load", "a") as trace:
        trace.write(f"load {os.environ.get('LLMBENCH_PAIR_SIDE')} {start} "
                    f"{time.monotonic()}\\n")


def pytest_sessionfinish(session):
    config = session.config
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    benchmarks = [{"name": b.name, "fullname": b.fullname, "group": b.group,
                   "stats": {"data": list(b.stats.data)}}
                  for b in config._benchmarksession.benchmarks]
    run = {"benchmarks": benchmarks, "commit_info": {"id": commit},
           "llmbench": {"environment": ENV}}
    config.hook.pytest_benchmark_update_json(config=config, benchmarks=[], output_json=run)
    folder = Path(config.getoption("baseline_dir")) / "fake-cpu-float32"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "0001_x.json").write_text(json.dumps(run))
'''

FAKE_TEST = '''
import os, time

import pytest

import llmbench

if os.environ.get("FAKE_RENDEZVOUS"):  # collecting: meet the other side, if it collects too
    _here = os.environ["FAKE_RENDEZVOUS"]
    _side = os.environ.get("LLMBENCH_PAIR_SIDE")
    open(os.path.join(_here, _side), "w").close()
    _other = "candidate" if _side == "baseline" else "baseline"
    _give_up = time.monotonic() + 30
    while not os.path.exists(os.path.join(_here, _other)) and time.monotonic() < _give_up:
        time.sleep(0.05)
    with open(os.environ["FAKE_TRACE"] + ".load", "a") as trace:
        trace.write(f"met {_side} {os.path.exists(os.path.join(_here, _other))}\\n")


def _round(speed):
    start = time.monotonic()
    if os.environ.get("FAKE_FAIL_SIDE") == os.environ.get("LLMBENCH_PAIR_SIDE"):
        raise RuntimeError("fake benchmark failing on purpose")
    time.sleep(0.01 * speed)
    with open(os.environ["FAKE_TRACE"], "a") as trace:
        trace.write(f"{os.environ.get('LLMBENCH_PAIR_SIDE')} {os.getpid()} {start} "
                    f"{time.monotonic()} {speed}\\n")


@pytest.mark.benchmark(group="speed")
def test_speed(benchmark):
    benchmark.pedantic(_round, args=(llmbench.SPEED,), rounds=3)
'''


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout


def commit_all(repo: Path, message: str) -> str:
    """Commit everything in `repo`; its sha."""
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD").strip()


def make_fake_repo(repo: Path, speed: float = 1.0) -> Path:
    """The fake suite in a new repository at `repo`, committed once at `speed`."""
    (repo / "llmbench").mkdir(parents=True)
    (repo / "llmbench" / "__init__.py").write_text(f"SPEED = {speed}\n")
    (repo / "conftest.py").write_text(textwrap.dedent(FAKE_CONFTEST))
    (repo / "test_fake.py").write_text(textwrap.dedent(FAKE_TEST))
    git(repo, "init", "-q")
    commit_all(repo, f"speed {speed:g}")
    return repo
