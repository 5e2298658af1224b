"""The suite's plugin at session end: one run JSON, judged by the gate and the work
reference, then saved.

The real-run tests (test_gate.py, on the tiny model) show the outcome: `--compare-to latest`
judges against the run before, never against the run being saved. These pin the wiring that
outcome depends on, without running a benchmark."""

from __future__ import annotations

import types

import pytest

from llmbench.bench import gate_hook, interleave, plugin, record, work_reference


@pytest.fixture
def calls(monkeypatch):
    seen = []
    monkeypatch.setattr(record, "benchmarks_enabled", lambda config: True)

    def run_json(config):
        seen.append(("run_json", None))
        return {"benchmarks": [{"name": "x"}]}

    monkeypatch.setattr(interleave, "finish_session",
                        lambda session: seen.append(("interleave", None)))
    monkeypatch.setattr(record, "run_json", run_json)
    monkeypatch.setattr(gate_hook, "judge", lambda session, output: seen.append(("judge", output)))
    monkeypatch.setattr(work_reference, "judge",
                        lambda session, output: seen.append(("work", output)))
    monkeypatch.setattr(record, "save", lambda config, output: seen.append(("save", output)))
    return seen


def _session(**config):
    return types.SimpleNamespace(config=types.SimpleNamespace(**config))


def test_the_run_json_is_built_once_then_judged_then_saved(calls):
    plugin.pytest_sessionfinish(_session(), 0)
    assert [name for name, _ in calls] == ["interleave", "run_json", "judge", "work", "save"]
    assert calls[2][1] is calls[3][1] is calls[4][1]  # the very same JSON


def test_a_gate_that_fails_unexpectedly_still_saves_the_run(calls, monkeypatch):
    def broken(session, output):
        raise RuntimeError("gate broke")

    monkeypatch.setattr(gate_hook, "judge", broken)
    with pytest.raises(RuntimeError, match="gate broke"):
        plugin.pytest_sessionfinish(_session(), 0)
    assert [name for name, _ in calls] == ["interleave", "run_json", "save"]


def test_an_xdist_worker_neither_judges_nor_saves(calls):
    plugin.pytest_sessionfinish(_session(workerinput={}), 0)
    assert calls == []


def test_without_timed_benchmarks_the_gate_hears_of_no_run(calls, monkeypatch):
    monkeypatch.setattr(record, "benchmarks_enabled", lambda config: False)
    plugin.pytest_sessionfinish(_session(), 0)
    assert calls == [("interleave", None), ("judge", None), ("work", None), ("save", None)]


@pytest.mark.parametrize("commit, part", [("3d12a17b9f", "3d12a17b"), ("unversioned", "nocommit"),
                                          ("unknown", "nocommit"), (None, "nocommit")])
def test_a_run_outside_git_is_named_nocommit(commit, part):
    assert record.file_commit({"commit_info": {"id": commit}}) == part


@pytest.mark.parametrize("version, public", [("2.13.0+cpu", "2.13.0"), ("2.13.0", "2.13.0"),
                                             ("5.24.0", "5.24.0"), (None, None)])
def test_work_is_judged_on_public_versions(version, public):
    # torch 2.13.0+cpu and PyPI's CUDA build 2.13.0 dispatch the same ops on the CPU.
    assert work_reference._public(version) == public
