"""Each run records its machine (its testbed), and the team's choice of fields decides which
machines are one testbed: the newest run and the noise between runs come from one kind of
machine where a store holds several (`runs.testbed`)."""

from __future__ import annotations

import copy
import re

import pytest
from gate_runs import SELECTION, make_run, run_pytest, suite_copy

from llmbench import runs
from llmbench.engine import device
from llmbench.errors import UserError
from llmbench.runs import testbed

XEON = {"cpu_model": "Intel(R) Xeon(R) Processor", "logical_cpus": 2, "memory_gib": 24,
        "gpu_name": None, "gpu_count": 0, "gpu_driver": None, "cuda": None, "mps": False}
EPYC = {**XEON, "cpu_model": "AMD EPYC 7B13"}


def test_this_machine_records_every_field():
    facts = device.testbed_facts()
    assert set(facts) == set(testbed.FIELDS)
    assert facts["logical_cpus"] >= 1 and facts["memory_gib"] >= 1 and facts["cpu_model"]


@pytest.mark.parametrize("text, message", [
    ("cpu_model,cores", "LLMBENCH_TESTBED_FIELDS: unknown field(s) cores; choose from"),
    (" , ", "LLMBENCH_TESTBED_FIELDS: no field; choose from"),
])
def test_a_bad_choice_of_fields_is_one_line_naming_the_choices(monkeypatch, text, message):
    monkeypatch.setenv(testbed.FIELDS_ENV, text)
    with pytest.raises(UserError, match=re.escape(message)) as caught:
        testbed.chosen_fields()
    assert "\n" not in str(caught.value) and "cpu_model, logical_cpus" in str(caught.value)


def test_two_cpu_models_are_two_testbeds_unless_the_team_says_otherwise(monkeypatch):
    monkeypatch.delenv(testbed.FIELDS_ENV, raising=False)
    assert not testbed.same_testbed(XEON, EPYC)
    assert testbed.differences(XEON, EPYC) == [
        "testbed cpu_model 'Intel(R) Xeon(R) Processor' vs 'AMD EPYC 7B13'"]
    monkeypatch.setenv(testbed.FIELDS_ENV, "logical_cpus,memory_gib")
    assert testbed.same_testbed(XEON, EPYC)
    cores = ("logical_cpus",)
    assert testbed.testbed_id(XEON, cores) == testbed.testbed_id(EPYC, cores)
    assert testbed.testbed_id(XEON, testbed.DEFAULT_FIELDS) != testbed.testbed_id(
        EPYC, testbed.DEFAULT_FIELDS)


def test_a_run_saved_before_testbeds_matches_any():
    assert testbed.same_testbed(None, XEON) and testbed.same_testbed(XEON, {})
    assert testbed.label(None).startswith("unknown testbed")
    assert testbed.label({**XEON, "gpu_count": 2, "gpu_name": "H100"}) == (
        "Intel(R) Xeon(R) Processor, 2 CPUs, 24 GiB, 2x H100")


def _save(store, facts, seed):
    data = make_run(seed)
    if facts is not None:
        data["llmbench"]["testbed"] = copy.deepcopy(facts)
    return store.save(data, "tiny-cpu-float32", f"run{seed}")


def test_latest_and_the_noise_history_come_from_the_runs_own_testbed(tmp_path, monkeypatch):
    monkeypatch.delenv(testbed.FIELDS_ENV, raising=False)
    store = runs.FolderStore(tmp_path)
    old = _save(store, None, 1)  # before testbeds were recorded: any testbed's
    xeon = _save(store, XEON, 2)
    epyc = _save(store, EPYC, 3)
    env = make_run(0)["llmbench"]["environment"]
    latest = runs.latest_comparable(store, "tiny-cpu-float32", env, bed=XEON)
    assert latest.origin == xeon
    history = runs.environment_runs(store, "tiny-cpu-float32", env, bed=XEON)
    assert [r.origin for r in history] == [old, xeon]
    monkeypatch.setenv(testbed.FIELDS_ENV, "logical_cpus")  # the team: one pool of 2-CPU VMs
    assert runs.latest_comparable(store, "tiny-cpu-float32", env, bed=XEON).origin == epyc
    monkeypatch.delenv(testbed.FIELDS_ENV)
    with pytest.raises(runs.NoBaseline, match="none of this environment and testbed .*"
                                              "differs: testbed logical_cpus 2 vs 64"):
        runs.latest_comparable(store, "tiny-cpu-float32", env, exclude=[old],
                               bed={**EPYC, "logical_cpus": 64})


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    return suite_copy(tmp_path_factory.mktemp("suite"))


def test_a_saved_run_records_its_testbed_and_a_bad_choice_is_refused_first(suite, tmp_path):
    proc = run_pytest(suite, "--benchmark-only", "--model", "tiny", f"--baseline-dir={tmp_path}",
                      SELECTION[0], LLMBENCH_TESTBED_FIELDS="gpu")
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout[-2000:]
    assert proc.stderr.strip() == ("ERROR: LLMBENCH_TESTBED_FIELDS: unknown field(s) gpu; "
                                   f"choose from {', '.join(testbed.FIELDS)} (comma-separated)")
    assert not list(tmp_path.glob("*/*.json"))
    proc = run_pytest(suite, "--benchmark-only", "--model", "tiny", f"--baseline-dir={tmp_path}",
                      SELECTION[0], LLMBENCH_TESTBED_FIELDS="cpu_model")
    assert proc.returncode == 0, proc.stdout[-2000:]
    (saved,) = tmp_path.glob("*/*.json")
    recorded = runs.load_run(saved).testbed
    assert {k: recorded[k] for k in testbed.FIELDS} == device.testbed_facts()
    assert recorded["fields"] == ["cpu_model"]
    assert recorded["id"] == testbed.testbed_id(recorded, ["cpu_model"])
