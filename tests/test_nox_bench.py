"""`nox -s bench` on a newcomer's machine: the real session (nox without a virtualenv or
installs, on a copy of the suite) in a baselines folder that holds another machine's run.
A first run there has nothing to compare with and still succeeds with a report; a real
slowdown that cannot be confirmed (the copy is no git checkout, so no paired A/B can run), or
a failing suite, still fails the session, after the report when there is one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gate_runs import REPO, SELECTION, SLOW_DECODE, TEST_THRESHOLD, TINY_ARGS, suite_copy, tiny_runs

from llmbench.ab import child_env

ENV_FOLDER = "tiny-cpu-float32"
OTHER_CPU = "AMD EPYC 7B13 64-Core Processor"


def nox_bench(suite: Path, *posargs: str, **env: str) -> subprocess.CompletedProcess:
    """`nox -s bench-cpu -- POSARGS` in `suite`, on this interpreter and this checkout."""
    environ = child_env()
    environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), environ["PATH"]])
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO),
                                                          environ.get("PYTHONPATH")]))
    # bench-cpu, not bench: the same _bench, without picking a GPU where one is present.
    cmd = [sys.executable, "-m", "nox", "-f", str(suite / "noxfile.py"), "--no-venv",
           "--no-install", "-s", "bench-cpu", "--", *posargs]
    proc = subprocess.run(cmd, cwd=suite, env={**environ, **env}, capture_output=True,
                          text=True, timeout=900)
    proc.output = proc.stdout + proc.stderr
    return proc


def another_machines_run(real_run: str) -> dict:
    """A real tiny run as if measured on another CPU: the same in every other field."""
    run = json.loads(Path(real_run).read_text(encoding="utf-8"))
    run["llmbench"]["environment"]["device_name"] = OTHER_CPU
    run["machine_info"]["llmbench"]["device_name"] = OTHER_CPU
    run["machine_info"]["cpu"]["brand_raw"] = OTHER_CPU
    return run


@pytest.fixture
def suite(tmp_path) -> Path:
    root = suite_copy(tmp_path / "suite")
    shutil.copy2(REPO / "noxfile.py", root)
    return root


def _reports(suite: Path) -> list[Path]:
    return sorted((suite / "reports" / ENV_FOLDER).glob("*/report.md"))


def test_a_first_run_beside_another_machines_run_succeeds_then_a_slowdown_fails(
        suite, tmp_path_factory):
    other = suite / "baselines" / ENV_FOLDER / "0001_other-machine.json"
    other.parent.mkdir(parents=True)
    other.write_text(json.dumps(another_machines_run(tiny_runs(tmp_path_factory).base)))
    before = other.read_bytes()

    first = nox_bench(suite, *TINY_ARGS, *SELECTION)
    assert first.returncode == 0, first.output[-4000:]
    assert "nothing to compare with" in first.output
    (no_baseline,) = [line for line in first.output.splitlines()
                      if line.startswith("no baseline: ")]
    assert no_baseline.startswith(f"no baseline: {other.parent} holds 1 other run, none of "
                                  f"this environment and testbed (the newest, {other.name}, "
                                  f"differs: device_name {OTHER_CPU!r} vs ")
    assert no_baseline.endswith("); the report has no comparison")
    (report,) = _reports(suite)
    assert report.parent.name.startswith("0002_")
    assert OTHER_CPU not in report.read_text(encoding="utf-8")  # no baseline section
    assert other.read_bytes() == before  # another machine's run is kept, untouched

    slow = nox_bench(suite, *TINY_ARGS, TEST_THRESHOLD, *SLOW_DECODE, *SELECTION)
    assert slow.returncode == 1, slow.output[-4000:]
    assert ("the benchmark run has slower benchmarks it could not confirm: Returned code 6"
            in slow.output)
    reports = _reports(suite)
    assert len(reports) == 2 and reports[1].parent.name.startswith("0003_")
    assert f"baseline: {report.parent.name}" not in slow.output  # the run, not its report
    baseline_line = next(line for line in slow.output.splitlines()
                         if line.startswith("baseline: ") and "latest run" in line)
    assert f"/{ENV_FOLDER}/0002_" in baseline_line  # this machine's run, never 0001
    assert "not confirmed" in reports[1].read_text(encoding="utf-8")


def test_a_failing_suite_fails_the_session_without_a_report(suite):
    proc = nox_bench(suite, "--model", "nosuchmodel", *SELECTION, HF_HUB_OFFLINE="1")
    assert proc.returncode == 1, proc.output[-4000:]
    assert "unknown model 'nosuchmodel'" in proc.output
    assert "the benchmark run failed or regressed" in proc.output
    assert not (suite / "reports").exists()
