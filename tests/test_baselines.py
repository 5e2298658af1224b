"""Reading runs back: every unusable file is one clear `RunError`; environments match on
model, fingerprint, device, dtype and threads, never on library versions; `latest` is the
newest run of the same environment; saved runs are numbered and never overwritten."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from gate_runs import ENVIRONMENT, make_run, write_run

from llmbench import runs
from llmbench.runs import EnvironmentMismatch, NoBaseline, RunError

DATA = Path(__file__).parent / "data"


def test_load_run_reads_samples_environment_and_control(tmp_path):
    path = write_run(tmp_path / "0001_x.json", make_run(1))
    run = runs.load_run(path)
    assert run.source == str(path)
    assert len(run.benchmarks) == 4
    bench = run.benchmarks["benchmarks/test_prefill_decode.py::test_decode_steps[ctx=16]"]
    assert bench.name == "test_decode_steps[ctx=16]"
    assert bench.group == "decode"
    assert len(bench.samples) == 10 and all(isinstance(x, float) for x in bench.samples)
    assert run.environment["threads"] == 2
    assert run.device == "cpu"
    assert len(run.control_s) == 12


def test_load_run_reads_a_real_saved_run():
    """A run saved by the suite (tiny model, trimmed to three benchmarks)."""
    run = runs.load_run(DATA / "tiny_run.json")
    assert {b.group for b in run.benchmarks.values()} == {"prefill", "decode"}
    assert all(len(b.samples) == 6 for b in run.benchmarks.values())
    assert run.environment["model"] == "tiny"
    assert run.control_s


def test_a_folder_means_its_newest_run(tmp_path):
    for number in (2, 10, 9):
        write_run(tmp_path / f"{number:04d}_x.json", make_run(number))
    (tmp_path / "notes.json").write_text("{}")
    assert Path(runs.load_run(tmp_path).source).name == "0010_x.json"


@pytest.mark.parametrize("content, fragments", [
    ('{"benchmarks": [{"name": ', ["truncated JSON", "re-run"]),
    ("not json at all", ["invalid JSON", "line 1"]),
    ("[1, 2]", ["not a pytest-benchmark run"]),
    ('{"machine_info": {}}', ["not a pytest-benchmark run", "'benchmarks'"]),
    ('{"benchmarks": []}', ["holds no benchmarks"]),
])
def test_unusable_files_are_one_line_errors(tmp_path, content, fragments):
    path = tmp_path / "run.json"
    path.write_text(content)
    with pytest.raises(RunError) as exc:
        runs.load_run(path)
    message = str(exc.value)
    assert "\n" not in message and str(path) in message
    for fragment in fragments:
        assert fragment in message


def test_missing_file_and_empty_folder(tmp_path):
    with pytest.raises(RunError, match="no such run file: .*nope.json"):
        runs.load_run(tmp_path / "nope.json")
    with pytest.raises(RunError, match="holds no numbered runs"):
        runs.load_run(tmp_path)


def test_a_run_without_raw_samples_names_the_flag_that_saves_them(tmp_path):
    run = make_run(1)
    for entry in run["benchmarks"]:
        del entry["stats"]["data"]
    path = write_run(tmp_path / "run.json", run)
    with pytest.raises(RunError) as exc:
        runs.load_run(path)
    assert "no raw per-round samples" in str(exc.value)
    assert "--benchmark-save-data" in str(exc.value)
    assert "--baseline-dir" in str(exc.value)


def test_a_baselines_root_names_its_environment_folders(tmp_path):
    write_run(tmp_path / "tiny-cpu-float32" / "0001_x.json", make_run(1))
    with pytest.raises(RunError, match=r"no numbered runs .*folders \(tiny-cpu-float32\)"):
        runs.load_run(tmp_path)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), "fast"])
def test_damaged_samples_are_refused(tmp_path, bad):
    run = make_run(1)
    run["benchmarks"][0]["stats"]["data"][3] = bad
    with pytest.raises(RunError, match="test_prefill"):
        runs.load_run(write_run(tmp_path / "run.json", run))


def test_a_run_with_one_benchmark_twice_is_refused(tmp_path):
    run = make_run(1)
    run["benchmarks"].append(copy.deepcopy(run["benchmarks"][0]))
    with pytest.raises(RunError, match="appears twice"):
        runs.load_run(write_run(tmp_path / "run.json", run))


def test_plain_pytest_benchmark_json_loads_without_environment(tmp_path):
    run = make_run(1)
    del run["llmbench"]
    loaded = runs.load_run(write_run(tmp_path / "run.json", run))
    assert loaded.environment is None and loaded.control_s == ()
    assert runs.environment_differences(loaded.environment, ENVIRONMENT) == [
        "no llmbench environment record in the baseline run"]


@pytest.mark.parametrize("field, value, expected", [
    ("model", "smollm2-135m", "model 'tiny' vs 'smollm2-135m'"),
    ("device", "cuda", "device 'cpu' vs 'cuda'"),
    ("dtype", "bfloat16", "dtype 'float32' vs 'bfloat16'"),
    ("threads", 4, "threads 2 vs 4"),
    ("device_name", "Other CPU", "device_name 'Test CPU' vs 'Other CPU'"),
])
def test_environment_differences_name_each_field(field, value, expected):
    other = {**ENVIRONMENT, field: value}
    assert runs.environment_differences(ENVIRONMENT, other) == [expected]


def test_rounds_taken_in_passes_are_another_measurement_than_back_to_back_rounds():
    """A run saved before passes were recorded took its rounds back to back: one pass."""
    before = {k: v for k, v in ENVIRONMENT.items() if k != "passes"}
    in_passes = {**before, "passes": 10}
    assert runs.environment_differences(before, in_passes) == ["passes 1 vs 10"]
    assert runs.environment_differences(before, {**before, "passes": 1}) == []


def latest(folder: Path, environment, exclude=()) -> Path:
    """The latest comparable run of an environment folder, as a path."""
    store = runs.FolderStore(folder.parent)
    refs = [runs.load_run(p).origin for p in exclude]
    return runs.latest_comparable(store, folder.name, environment, exclude=refs).path


def test_the_baseline_is_the_newest_run_taken_in_as_many_passes(tmp_path):
    one_pass = write_run(tmp_path / "0001_a.json", make_run(1))
    write_run(tmp_path / "0002_b.json", make_run(2, environment={**ENVIRONMENT, "passes": 10}))
    assert latest(tmp_path, ENVIRONMENT) == one_pass
    with pytest.raises(NoBaseline, match=r"0002_b.json, differs: passes 10 vs 5\)$"):
        latest(tmp_path, {**ENVIRONMENT, "passes": 5})


def test_fingerprint_difference_lists_its_keys_and_versions_are_allowed():
    other = copy.deepcopy(ENVIRONMENT)
    other["fingerprint"]["num_parameters"] += 1
    other["versions"]["torch"] = "2.14.0"
    assert runs.environment_differences(ENVIRONMENT, other) == [
        "model fingerprint differs in num_parameters"]
    upgraded = {**ENVIRONMENT, "versions": {**ENVIRONMENT["versions"], "torch": "2.14.0"}}
    assert runs.environment_differences(ENVIRONMENT, upgraded) == []
    assert runs.version_differences(ENVIRONMENT, upgraded) == {
        "torch": ("2.13.0+cpu", "2.14.0")}


def test_mismatch_message_lists_differences_and_the_override():
    message = str(EnvironmentMismatch(["threads 2 vs 4", "dtype 'a' vs 'b'"]))
    assert "threads 2 vs 4; dtype 'a' vs 'b'" in message
    assert "--allow-mismatch" in message


def test_latest_run_is_the_newest_of_the_same_environment(tmp_path):
    env4 = {**ENVIRONMENT, "threads": 4}
    write_run(tmp_path / "0001_a.json", make_run(1))
    write_run(tmp_path / "0002_b.json", make_run(2))
    write_run(tmp_path / "0003_c.json", make_run(3, environment=env4))
    (tmp_path / "0004_broken.json").write_text("{")
    assert runs.latest_run(tmp_path).name == "0004_broken.json"
    with pytest.warns(runs.DamagedRunSkipped, match="0004_broken.json"):
        assert latest(tmp_path, ENVIRONMENT).name == "0002_b.json"
        assert latest(tmp_path, env4).name == "0003_c.json"
        excluded = latest(tmp_path, ENVIRONMENT, exclude=[tmp_path / "0002_b.json"])
    assert excluded.name == "0001_a.json"
    assert runs.latest_run(tmp_path / "absent") is None
    with pytest.warns(runs.DamagedRunSkipped), pytest.raises(NoBaseline):
        latest(tmp_path, {**ENVIRONMENT, "dtype": "x"})


def test_latest_comparable_never_takes_another_machines_run_and_says_why(tmp_path):
    with pytest.raises(NoBaseline) as none:
        latest(tmp_path, ENVIRONMENT)
    assert str(none.value) == f"{tmp_path} holds no other run"
    mine = write_run(tmp_path / "0001_a.json", make_run(1))
    other_cpu = {**ENVIRONMENT, "device_name": "Another CPU"}
    write_run(tmp_path / "0002_b.json", make_run(2, environment=other_cpu))
    assert latest(tmp_path, ENVIRONMENT) == mine
    with pytest.raises(NoBaseline) as excluded:
        latest(tmp_path, ENVIRONMENT, exclude=[mine])
    assert str(excluded.value) == (f"{tmp_path} holds 1 other run, none of this environment and "
                                   "testbed (the newest, 0002_b.json, differs: device_name "
                                   "'Another CPU' vs 'Test CPU')")
    with pytest.raises(NoBaseline, match="no llmbench environment record"):
        latest(tmp_path, None)


def test_save_numbered_never_overwrites(tmp_path):
    first = runs.save_numbered(tmp_path, {"n": 1}, "abc")
    second = runs.save_numbered(tmp_path, {"n": 2}, "abc")
    assert (first.name, second.name) == ("0001_abc.json", "0002_abc.json")
    assert json.loads(first.read_text()) == {"n": 1}
    assert runs.list_runs(tmp_path) == [first, second]
    with pytest.raises(FileExistsError):
        runs.write_new_json(first, {"n": 3})
    assert json.loads(first.read_text()) == {"n": 1}
    assert not list(tmp_path.glob(".*tmp"))  # no temporary file left behind


def test_same_run_means_identical_samples_in_every_shared_benchmark():
    run = runs.run_from_json(make_run(1), "a")
    assert runs.is_same_run(run, runs.run_from_json(make_run(1), "a copy"))
    one_changed = runs.run_from_json(make_run(1, factors={"test_prefill[in=32]": 1.01}),
                                          "b")
    assert not runs.is_same_run(run, one_changed)
    assert not runs.is_same_run(run, runs.run_from_json(make_run(2), "c"))
    other = runs.run_from_json(make_run(1, benchmarks={"test_other": "other"}), "d")
    assert not runs.is_same_run(run, other)  # nothing in common: not one run
