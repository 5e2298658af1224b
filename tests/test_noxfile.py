"""noxfile helpers that decide what a session does with the user's arguments."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def noxfile():
    pytest.importorskip("nox")
    sys.path.insert(0, str(ROOT))
    try:
        import noxfile
    finally:
        sys.path.remove(str(ROOT))
    return noxfile


@pytest.mark.parametrize("posargs, baseline", [
    ([], "latest"),
    (["-k", "decode"], "latest"),
    (["--compare-to=baselines/e/0003_x.json"], "baselines/e/0003_x.json"),
    (["--compare-to", "baselines/e"], "baselines/e"),
    (["--compare-to=a.json", "--compare-to=b.json"], "b.json"),  # pytest keeps the last
])
def test_the_report_is_drawn_against_the_run_the_gate_judged_against(noxfile, posargs,
                                                                     baseline):
    assert noxfile._option(posargs, "--compare-to", "latest") == baseline


def test_the_report_reads_the_store_the_run_was_saved_in(noxfile):
    assert noxfile._option(["--store=sqlite:///r.db", "-k", "x"], "--store") == "sqlite:///r.db"
    assert noxfile._option(["-k", "x"], "--store") is None


def test_the_history_sessions_minimum_is_the_historys(noxfile):
    from llmbench.history import MIN_RUNS

    assert noxfile.HISTORY_MIN_RUNS == MIN_RUNS
