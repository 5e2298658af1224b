"""A folder store never loses a run: it is checked before the first benchmark, a save that
fails after the benchmarks ran keeps the run elsewhere and says where, a damaged run
anywhere is named and left out (never a traceback), samples no clock measures are refused
naming the run and benchmark, and run numbers are unique whatever the labels."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gate_runs import SELECTION, TINY_ARGS, make_run, run_pytest, suite_copy, write_run

from llmbench import runs
from llmbench.runs import RunError

USAGE_ERROR = pytest.ExitCode.USAGE_ERROR


def _unwritable(folder: Path):
    """Make `folder` refuse new files, even to root (`chattr +i`); skip where this cannot
    be done. Returns the undo."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        folder.chmod(0o500)
        return lambda: folder.chmod(0o700)
    made = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot make a folder unwritable to root here: {made.stderr.strip()}")
    return lambda: subprocess.run(["chattr", "-i", str(folder)], check=True)


# -- checked before the first benchmark ----------------------------------------------------

def test_a_file_where_the_folder_should_be_is_refused(tmp_path):
    (tmp_path / "baselines").write_text("not a folder")
    with pytest.raises(RunError, match=r"^cannot save runs in .*baselines/env: .*baselines is a "
                                       r"file, not a folder$"):
        runs.check_writable(tmp_path / "baselines" / "env")


def test_an_unwritable_folder_is_refused_and_nothing_is_left(tmp_path):
    undo = _unwritable(tmp_path / "locked")
    try:
        with pytest.raises(RunError, match=r"^cannot save runs in .*locked/env: "):
            runs.check_writable(tmp_path / "locked" / "env")
    finally:
        undo()
    assert list((tmp_path / "locked").iterdir()) == []


def test_a_writable_folder_passes_and_nothing_is_made(tmp_path):
    runs.check_writable(tmp_path / "new" / "env")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    return suite_copy(tmp_path_factory.mktemp("suite"))


@pytest.mark.parametrize("how", ["file", "unwritable"])
def test_the_suite_refuses_a_baseline_dir_it_cannot_write_before_any_benchmark(suite, tmp_path,
                                                                              how):
    target = tmp_path / "baselines"
    undo = None
    if how == "file":
        target.write_text("not a folder")
    else:
        undo = _unwritable(target)
    try:
        proc = run_pytest(suite, *TINY_ARGS, f"--baseline-dir={target}", SELECTION[0])
    finally:
        if undo:
            undo()
    assert proc.returncode == USAGE_ERROR, (proc.stdout + proc.stderr)[-3000:]
    line = proc.stderr.strip()
    assert line.startswith(f"ERROR: --baseline-dir: cannot save runs in {target}/"), line
    assert line.endswith("pass another --baseline-dir, or --no-save") and "\n" not in line
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "passed" not in proc.stdout  # no benchmark ran


def test_no_save_needs_no_writable_folder(suite, tmp_path):
    (tmp_path / "baselines").write_text("not a folder")
    proc = run_pytest(suite, *TINY_ARGS, f"--baseline-dir={tmp_path / 'baselines'}",
                      "--no-save", SELECTION[0])
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


def test_a_save_that_fails_after_the_benchmarks_keeps_the_run_and_says_where(suite, tmp_path):
    """The folder could be written when the options were checked and cannot when the run
    ends (a plugin puts a file where it was once the session starts): the run is kept
    elsewhere, the summary names the place, the session fails."""
    target = tmp_path / "baselines"
    (suite / "block_folder.py").write_text(
        "from pathlib import Path\n"
        "def pytest_sessionstart(session):\n"
        f"    Path({str(target)!r}).write_text('now a file')\n")
    try:  # `python -m pytest` in the suite's folder imports the plugin from there
        proc = run_pytest(suite, *TINY_ARGS, f"--baseline-dir={target}", "-p", "block_folder",
                          SELECTION[0])
    finally:
        (suite / "block_folder.py").unlink()
    out = proc.stdout + proc.stderr
    assert proc.returncode == USAGE_ERROR, out[-3000:]
    found = re.search(r"llmbench: could not save the run in (\S+) \((.+?)\); it is kept in "
                      r"(\S+): `llmbench store push (\S+) --to (\S+)` saves it there once "
                      r"the store can be written", out)
    assert found, out[-3000:]
    kept, rescue = Path(found.group(3)), Path(found.group(4))
    assert found.group(5) == str(target) and kept.parent.parent == rescue
    saved = runs.load_run(kept)
    assert SELECTION[0].split("::")[1] in {b.name for b in saved.benchmarks.values()}
    assert target.read_text() == "now a file"
    shutil.rmtree(rescue)


# -- damaged runs are named and left out ---------------------------------------------------

DAMAGED = {
    "nested": "[" * 200_000,
    "huge integer": '{"benchmarks": [{"name": "x", "stats": {"data": [' + "9" * 5000 + "]}}]}",
}


@pytest.mark.parametrize("kind", sorted(DAMAGED))
def test_json_no_run_can_hold_is_one_line(tmp_path, kind):
    path = tmp_path / "0001_x.json"
    path.write_text(DAMAGED[kind])
    with pytest.raises(RunError) as caught:
        runs.load_run(path)
    assert str(path) in str(caught.value) and "damaged" in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("value, where", [
    (5e-324, "data"), (7200.0, "data"), (10 ** 400, "data"), (5e-324, "median"),
])
def test_samples_no_clock_measures_are_refused_naming_run_and_benchmark(tmp_path, value, where):
    run = make_run(1)
    stats = run["benchmarks"][0]["stats"]
    if where == "data":
        stats["data"] = [value] * len(stats["data"])
    else:
        stats[where] = value
    path = write_run(tmp_path / "run.json", run)
    with pytest.raises(RunError) as caught:
        runs.load_run(path)
    message = str(caught.value)
    assert str(path) in message and run["benchmarks"][0]["fullname"] in message
    assert "damaged" in message and "\n" not in message


def test_damaged_control_samples_are_refused(tmp_path):
    run = make_run(1)
    run["llmbench"]["control_s"] = [0.01, -1.0]
    with pytest.raises(RunError, match="the control workload has samples outside"):
        runs.load_run(write_run(tmp_path / "run.json", run))


def _folder_with_a_damaged_newest(tmp_path) -> tuple[Path, Path]:
    folder = tmp_path / "env"
    write_run(folder / "0001_a.json", make_run(1))
    write_run(folder / "0002_b.json", make_run(2))
    damaged = folder / "0003_c.json"
    damaged.write_text("[" * 200_000)
    return folder, damaged


def test_latest_goes_past_a_damaged_run_and_names_it(tmp_path):
    folder, damaged = _folder_with_a_damaged_newest(tmp_path)
    environment = runs.load_run(folder / "0001_a.json").environment
    with pytest.warns(runs.DamagedRunSkipped, match=re.escape(str(damaged))):
        found = runs.latest_comparable(runs.FolderStore(folder.parent), folder.name,
                                       environment)
    assert found.path.name == "0002_b.json"


def test_the_noise_history_names_what_it_leaves_out(tmp_path):
    folder, damaged = _folder_with_a_damaged_newest(tmp_path)
    environment = runs.load_run(folder / "0001_a.json").environment
    with pytest.warns(runs.DamagedRunSkipped, match=re.escape(str(damaged))):
        found = runs.environment_runs(runs.FolderStore(folder.parent), folder.name,
                                      environment)
    assert len(found) == 2


def test_compare_of_two_healthy_runs_beside_a_damaged_one(tmp_path):
    """`llmbench compare` reads the whole folder for the noise between runs: a damaged run
    there is named on stderr in one line, and the comparison goes on."""
    folder, damaged = _folder_with_a_damaged_newest(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "llmbench", "compare",
                           str(folder / "0001_a.json"), str(folder / "0002_b.json")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1, 6), proc.stderr
    assert "Traceback" not in proc.stderr
    named = [line for line in proc.stderr.splitlines() if str(damaged) in line]
    assert named and named[0].startswith("llmbench compare: left out a damaged run: ")


# -- numbering -----------------------------------------------------------------------------

def _save_five(folder: str, worker: int) -> list[str]:
    return [runs.save_numbered(Path(folder), {"worker": worker, "i": i},
                               f"{worker:02d}_{i}").name for i in range(5)]


def test_run_numbers_are_unique_whatever_the_labels(tmp_path):
    """16 processes saving 5 runs each into one folder, each with labels of its own (other
    commits, other seconds): 80 files, 80 numbers."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(16) as pool:
        names = [n for chunk in pool.starmap(_save_five, [(str(tmp_path), w) for w in range(16)])
                 for n in chunk]
    numbers = sorted(runs.run_number(Path(n)) for n in names)
    assert numbers == list(range(1, 81))
    assert sorted(p.name for p in runs.list_runs(tmp_path)) == sorted(names)
    for path in runs.list_runs(tmp_path):
        json.loads(path.read_text())  # every file whole


def test_a_keep_folder_that_is_a_file_is_one_line(tmp_path):
    from llmbench.ab.run import ABError, _check_keep

    (tmp_path / "kept").write_text("x")
    with pytest.raises(ABError, match=r"^--keep .*kept: that is a file, not a folder"):
        _check_keep(tmp_path / "kept")
