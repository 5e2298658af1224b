"""Runs for the gate's tests: synthetic pytest-benchmark JSON, and real runs on the tiny model.

Synthetic runs draw seeded log-normal timings, so verdicts are fixed by the seed and no test
depends on how fast this machine is today. Real runs execute a copy of the benchmark suite
(conftest.py, pytest.ini, fixtures/, the prefill/decode module) in a subprocess, two
benchmarks at a few rounds on one thread, and are made once per test session: under xdist
the first worker makes them under a file lock and the others read them.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from filelock import FileLock

from llmbench.ab import child_env
from llmbench.runs import Run, run_from_json

REPO = Path(__file__).resolve().parents[1]

ENVIRONMENT = {
    "model": "tiny",
    "fingerprint": {"name": "tiny", "source": {"kind": "random", "seed": 0},
                    "architecture": "LlamaForCausalLM", "num_parameters": 3219776,
                    "dtype": "float32"},
    "device": "cpu",
    "device_name": "Test CPU",
    "dtype": "float32",
    "threads": 2,
    "versions": {"python": "3.11.7", "torch": "2.13.0+cpu", "transformers": "5.24.0",
                 "llmbench": "0.1.0", "pytest-benchmark": "5.2.3"},
    "thread_env": {},
}

# name -> group, as the suite's ids read
BENCHMARKS = {
    "test_prefill[in=32]": "prefill",
    "test_prefill[in=128]": "prefill",
    "test_decode_steps[ctx=16]": "decode",
    "test_decode_steps[ctx=128]": "decode",
}


def samples(seed: int, median: float, rounds: int = 10, cv: float = 0.03,
            factor: float = 1.0) -> list[float]:
    sigma = np.sqrt(np.log1p(cv ** 2))
    rng = np.random.default_rng(seed)
    return list(median * factor * rng.lognormal(0.0, sigma, rounds))


def make_run(seed: int = 0, *, factors: dict[str, float] | None = None, rounds: int = 10,
             control_factor: float = 1.0, environment: dict | None = None,
             benchmarks: dict[str, str] | None = None, module: str = "test_prefill_decode"
             ) -> dict:
    """A run's JSON: `factors` slows (> 1) or speeds up (< 1) benchmarks or whole groups."""
    factors = factors or {}
    entries = []
    for i, (name, group) in enumerate((benchmarks or BENCHMARKS).items()):
        factor = factors.get(name, factors.get(group, 1.0))
        data = samples(seed * 1000 + i, 0.05 * (i + 1), rounds, factor=factor)
        entries.append({
            "group": group, "name": name,
            "fullname": f"benchmarks/{module}.py::{name}",
            "params": None, "param": None, "extra_info": {"output_tokens": 10},
            "options": {},
            "stats": {"median": float(np.median(data)), "rounds": rounds, "data": data},
        })
    env = copy.deepcopy(ENVIRONMENT if environment is None else environment)
    return {
        "machine_info": {"node": "test"},
        "commit_info": {"id": f"{seed:040x}", "dirty": False},
        "benchmarks": entries,
        "datetime": "2026-01-01T00:00:00+00:00",
        "version": "5.2.3",
        "llmbench": {"environment": env, "profile": "quick", "rounds": rounds,
                     "control_s": samples(seed + 7919, 0.02, 12, factor=control_factor)},
    }


QUIET_COMMIT = "e" * 40


def quiet_history_json(count: int = 4, seed: int = 900) -> list[dict]:
    """Runs of one commit on a quiet machine: the noise between runs is measured and small
    (only the rounds' own), so a stored comparison's verdicts are the rounds' verdicts."""
    made = []
    for i in range(count):
        data = make_run(seed + i)
        data["commit_info"]["id"] = QUIET_COMMIT
        made.append(data)
    return made


def quiet_history(count: int = 4, seed: int = 900) -> list[Run]:
    return [run_from_json(data, f"quiet run {i + 1}")
            for i, data in enumerate(quiet_history_json(count, seed))]


def write_run(path: Path, run: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run), encoding="utf-8")
    return path


# --- Real runs on the tiny model ---------------------------------------------------------

SELECTION = ["benchmarks/test_prefill_decode.py::test_prefill[in=32]",
             "benchmarks/test_prefill_decode.py::test_decode_steps[ctx=16]"]
# One thread: xdist workers and other jobs share two cores, and torch's default of one
# thread per core on top of them is several times slower and far noisier.
TINY_ARGS = ["--benchmark-only", "--model", "tiny", "--threads", "1", "--rounds", "6",
             "--warmup-rounds", "1", "-p", "no:cacheprovider"]
# A 10x slowdown of every decode step, and a 200% threshold: this machine's speed swings by
# 2-3x between runs minutes apart, so the tests ask only what no such swing can fake.
SLOW_DECODE = ["-p", "llmbench.bench.inject", "--slow-down", "decode_step=9"]
TEST_THRESHOLD = "--threshold=200%"
GATE_NODE = "llmbench::regression-gate"


def suite_copy(dest: Path) -> Path:
    """The benchmark suite's pytest files, copied: runs stay out of the repository."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("conftest.py", "pytest.ini"):
        shutil.copy2(REPO / name, dest / name)
    shutil.copytree(REPO / "fixtures", dest / "fixtures",
                    ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    (dest / "benchmarks").mkdir(exist_ok=True)
    shutil.copy2(REPO / "benchmarks" / "test_prefill_decode.py", dest / "benchmarks")
    return dest


def run_pytest(cwd: Path, *args: str, timeout: float = 600, **env: str
               ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=cwd,
                          env={**child_env(), **env}, capture_output=True, text=True,
                          timeout=timeout)


@dataclass
class TinyRuns:
    suite: str
    baseline_dir: str
    base: str  # the first run
    same: str  # unchanged code, --compare-to latest
    slow: str  # decode slowed, --compare-to=base
    first_out: str
    first_rc: int
    same_out: str
    same_rc: int
    same_junit: str
    slow_out: str
    slow_rc: int
    slow_junit: str


def _new_runs(folder: Path) -> list[Path]:
    return sorted(folder.glob("*/*.json"))


def _make_tiny_runs(root: Path) -> TinyRuns:
    suite = suite_copy(root / "suite")
    runs = root / "baselines"
    common = [*TINY_ARGS, f"--baseline-dir={runs}", *SELECTION]
    first = run_pytest(suite, *common, "--compare-to", "latest")
    assert first.returncode == 0, first.stdout + first.stderr
    (base,) = _new_runs(runs)
    junit_same, junit_slow = root / "same.xml", root / "slow.xml"
    same = run_pytest(suite, *common, "--compare-to", "latest", TEST_THRESHOLD,
                      f"--junitxml={junit_same}")
    slow = run_pytest(suite, *common, f"--compare-to={base}", TEST_THRESHOLD,
                      f"--junitxml={junit_slow}", *SLOW_DECODE)
    made = _new_runs(runs)
    assert len(made) == 3, (made, same.stdout[-2000:], slow.stdout[-2000:])
    return TinyRuns(suite=str(suite), baseline_dir=str(runs), base=str(made[0]),
                    same=str(made[1]), slow=str(made[2]),
                    first_out=first.stdout + first.stderr, first_rc=first.returncode,
                    same_out=same.stdout + same.stderr, same_rc=same.returncode,
                    same_junit=junit_same.read_text() if junit_same.exists() else "",
                    slow_out=slow.stdout + slow.stderr, slow_rc=slow.returncode,
                    slow_junit=junit_slow.read_text() if junit_slow.exists() else "")


def tiny_runs(tmp_path_factory) -> TinyRuns:
    """Three real tiny runs, made once per session (shared by xdist workers)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return _make_tiny_runs(tmp_path_factory.mktemp("tiny_runs"))
    shared = tmp_path_factory.getbasetemp().parent  # one folder for all workers
    record = shared / "tiny_runs.json"
    with FileLock(str(shared / "tiny_runs.lock")):
        if not record.exists():
            record.write_text(json.dumps(asdict(_make_tiny_runs(shared / "tiny_runs"))))
    return TinyRuns(**json.loads(record.read_text()))
