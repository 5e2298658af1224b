"""Saved runs as files: readable by others as a plain open() would make them, and versioned,
so that a run written by a newer llmbench is refused by name and an older one still reads."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path

import pytest

from llmbench import gate, runs
from llmbench.runs import FORMAT_VERSION, RunError

DATA = Path(__file__).parent / "data"
FORMAT_1 = DATA / "run_format1.json"  # saved by llmbench 2739dcd, before runs had a format


@pytest.fixture
def umask():
    def set_mask(mask: int) -> None:
        os.umask(mask)
    old = os.umask(0o022)
    yield set_mask
    os.umask(old)


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_saved_runs_and_reports_get_the_mode_open_would_give(tmp_path, umask, mask, mode):
    umask(mask)
    saved = runs.save_numbered(tmp_path / "env", {"benchmarks": []}, "label")
    runs.write_atomic(tmp_path / "report.md", "# report\n")
    for path in (saved, tmp_path / "report.md"):
        assert stat.S_IMODE(path.stat().st_mode) == mode, path


def test_an_old_format_run_still_reads_and_compares():
    old = runs.load_run(FORMAT_1)
    assert "format" not in old.info  # saved before runs recorded their format
    assert len(old.benchmarks) == 2 and old.environment["model"] == "tiny"
    copy = dataclasses.replace(old, source="copy", benchmarks={
        k: dataclasses.replace(b, samples=tuple(x * 1.01 for x in b.samples))
        for k, b in old.benchmarks.items()})
    result = gate.compare_runs(old, copy)
    assert len(result.comparisons) == 2 and result.same_code  # one commit, clean, same versions


def test_a_newer_format_is_refused_naming_both_versions(tmp_path):
    data = json.loads(FORMAT_1.read_text())
    data["llmbench"]["format"] = FORMAT_VERSION + 1
    path = tmp_path / "0001_new.json"
    path.write_text(json.dumps(data))
    with pytest.raises(RunError, match=rf"written in llmbench run format {FORMAT_VERSION + 1}, "
                                       rf"newer than this llmbench reads \(up to "
                                       rf"{FORMAT_VERSION}\): upgrade llmbench"):
        runs.load_run(path)


def test_a_damaged_format_is_one_line(tmp_path):
    data = json.loads(FORMAT_1.read_text())
    data["llmbench"]["format"] = "two"
    path = tmp_path / "0001_bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(RunError, match="its llmbench format 'two' is not a version number"):
        runs.load_run(path)

