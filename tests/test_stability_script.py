"""scripts/stability.py runs: the between-run spread of saved runs of one code, and one line
for what it cannot read."""

from __future__ import annotations

import json
import subprocess
import sys

from gate_runs import REPO, make_run

SCRIPT = REPO / "scripts" / "stability.py"


def _stability(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "runs", *args], capture_output=True,
                          text=True, timeout=120)


def _saved(tmp_path, seeds, factor_of=lambda seed: None):
    paths = []
    for seed in seeds:
        path = tmp_path / f"run{seed}.json"
        path.write_text(json.dumps(make_run(seed, factors=factor_of(seed))))
        paths.append(str(path))
    return paths


def test_it_prints_each_runs_move_and_the_spread_of_the_benchmarks(tmp_path):
    proc = _stability(*_saved(tmp_path, (1, 2, 3)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("shared move x") == 3
    assert "3 runs, " in proc.stdout and "residual over the rounds' standard error" in proc.stdout


def test_one_benchmark_that_moves_between_runs_is_the_worst(tmp_path):
    paths = _saved(tmp_path, (1, 2, 3, 4), lambda seed: {"decode": 1.0 + 0.1 * seed})
    proc = _stability(*paths)
    assert proc.returncode == 0, proc.stderr
    assert "worst" in proc.stdout and "(test_decode" in proc.stdout.split("worst", 1)[1]


def test_one_run_or_a_file_that_is_no_run_gets_one_line(tmp_path):
    (one,) = _saved(tmp_path, (1,))
    proc = _stability(one)
    assert proc.returncode == 1 and "two or more saved runs" in proc.stderr
    assert "Traceback" not in proc.stderr
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"benchmarks": []}))
    proc = _stability(one, str(other))
    assert proc.returncode == 1 and f"{other}: " in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
