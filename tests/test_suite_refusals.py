"""The benchmark suite refuses what it cannot do with one line and pytest's usage-error exit
(4), before any case runs: a model that cannot be loaded, benchmarks under xdist, a
--saved-path-file that cannot be written. Real pytest processes on a copy of the suite."""

from __future__ import annotations

import pytest
from gate_runs import SELECTION, run_pytest, suite_copy

USAGE_ERROR = pytest.ExitCode.USAGE_ERROR
# Offline, an unknown hub id fails at once instead of after the hub's retries.
OFFLINE = {"HF_HUB_OFFLINE": "1"}
UNKNOWN_MODEL = "unknown model 'nosuchmodel'"


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    root = suite_copy(tmp_path_factory.mktemp("suite"))
    (root / "tests").mkdir()
    (root / "tests" / "test_library.py").write_text("def test_library():\n    pass\n")
    return root


def _output(proc) -> str:
    return proc.stdout + proc.stderr


def test_a_model_that_cannot_load_fails_once_before_any_case(suite, tmp_path):
    proc = run_pytest(suite, "--benchmark-only", "--model", "nosuchmodel",
                      f"--baseline-dir={tmp_path}", **OFFLINE)
    out = _output(proc)
    assert proc.returncode == USAGE_ERROR, out[-3000:]
    assert out.count(UNKNOWN_MODEL) == 1, out[-3000:]
    assert "llmbench: unknown model 'nosuchmodel': not a registered name" in out
    assert "ERROR " not in out and "Traceback" not in out
    assert "no tests ran" in out
    assert not list(tmp_path.iterdir())  # nothing measured, nothing saved


@pytest.mark.parametrize("args, code", [
    (["--collect-only", "-q"], pytest.ExitCode.OK),
    (["-k", "no_such_case"], pytest.ExitCode.NO_TESTS_COLLECTED),
])
def test_runs_that_select_no_case_never_load_the_model(suite, args, code):
    proc = run_pytest(suite, "--benchmark-only", "--model", "nosuchmodel", "--no-save", *args,
                      **OFFLINE)
    assert proc.returncode == code, _output(proc)[-3000:]
    assert UNKNOWN_MODEL not in _output(proc)


def test_a_saved_path_file_in_a_missing_folder_is_refused_before_running(suite, tmp_path):
    target = tmp_path / "absent" / "saved.txt"
    proc = run_pytest(suite, "--benchmark-only", "--model", "tiny", f"--saved-path-file={target}",
                      f"--baseline-dir={tmp_path}", SELECTION[0])
    assert proc.returncode == USAGE_ERROR, _output(proc)[-3000:]
    assert proc.stderr.strip() == (f"ERROR: --saved-path-file {target}: its folder does not "
                                   "exist; create it or pick a file in an existing folder")
    assert not list(tmp_path.glob("*/*.json"))


@pytest.mark.parametrize("args", [["benchmarks"], [], [SELECTION[0]], ["."]])
def test_benchmarks_under_xdist_are_refused_before_workers_start(suite, args):
    proc = run_pytest(suite, "-n", "2", "--model", "tiny", "--no-save", *args)
    assert proc.returncode == USAGE_ERROR, _output(proc)[-3000:]
    assert proc.stderr.strip() == ("ERROR: benchmarks must run serially: drop -n, or pass "
                                   "--benchmark-disable for a smoke run")
    assert "INTERNALERROR" not in _output(proc) and "[gw0]" not in _output(proc)


def test_other_tests_stay_parallel(suite):
    proc = run_pytest(suite, "-n", "2", "tests", "-p", "no:cacheprovider")
    assert proc.returncode == pytest.ExitCode.OK, _output(proc)[-3000:]
    assert "1 passed" in proc.stdout


@pytest.mark.slow
def test_a_parallel_smoke_run_still_works(suite):
    proc = run_pytest(suite, "-n", "2", "--benchmark-disable", "--model", "tiny", "--threads",
                      "1", "--no-save", "-p", "no:cacheprovider", *SELECTION)
    assert proc.returncode == pytest.ExitCode.OK, _output(proc)[-3000:]
    assert "2 passed" in proc.stdout


@pytest.mark.slow
def test_a_parallel_smoke_run_with_a_bad_model_stops_without_crashing(suite):
    proc = run_pytest(suite, "-n", "2", "--benchmark-disable", "--model", "nosuchmodel",
                      "--no-save", "-p", "no:cacheprovider", **OFFLINE)
    out = _output(proc)
    # Each worker meets the error once and stops; xdist ends the run as interrupted.
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:]
    assert "INTERNALERROR" not in out and "Traceback" not in out
    assert out.count("ERROR at setup") <= 2
    assert f"Interrupted: llmbench: {UNKNOWN_MODEL}" in out
