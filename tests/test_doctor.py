"""`llmbench doctor`: the machine's state as it bears on timing, each item with what it costs
and how to change it; exit 1 when an item costs stability."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from llmbench.engine import machine_state as ms
from tests.test_cli import run_main


def test_a_multiple_choice_file_reads_as_its_choice():
    assert ms._selected("always [madvise] never") == "madvise"
    assert ms._selected("performance") == "performance"
    assert ms._selected(None) is None


def test_more_torch_threads_than_cpus_costs(monkeypatch):
    monkeypatch.setattr(ms.disturbance, "our_cpus", lambda: frozenset({0, 1}))
    over = ms.threads_check(4)
    assert over.status == ms.COSTS and over.fix == "--threads 2"
    assert ms.threads_check(2).status == ms.OK


def test_the_host_is_watched_through_a_fixed_workloads_rounds():
    steady = ms.host_check(lambda: 0.01, seconds=0.01)
    assert steady.status == ms.OK and "spread 0.0%" in steady.state
    times = iter([0.01, 0.013] * 100)
    noisy = ms.host_check(lambda: next(times), seconds=0.0)
    assert noisy.status == ms.COSTS and "medians of ten rounds spread about" in noisy.cost


def test_isolated_cpus_are_a_note_not_a_cost(monkeypatch):
    monkeypatch.setattr(ms, "_read", lambda path: "" if path.endswith("isolated") else None)
    isolated = [c for c in ms.topology_checks() if c.name == "isolated CPUs"][0]
    assert isolated.status == ms.NOTE and "isolcpus" in isolated.fix


def test_every_check_says_its_state_and_status():
    checks = ms.machine_checks(torch_threads=1, sample_s=0.2, time_once=lambda: 0.01)
    names = [c.name for c in checks]
    assert names[:3] == ["other processes", "steal", "host speed"]
    assert {"frequency governor", "turbo", "SMT", "isolated CPUs", "transparent huge pages",
            "address-space randomisation", "torch threads"} <= set(names)
    for c in checks:
        assert c.status in (ms.OK, ms.NOTE, ms.COSTS, ms.UNKNOWN) and c.state
        assert c.status != ms.COSTS or c.cost, c  # a cost is always said


def test_a_co_runner_is_named_among_what_costs():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        (others, _steal) = ms.others_check(0.5)
    finally:
        spinner.kill()
        spinner.wait()
    assert others.status == ms.COSTS
    assert "python" in others.state  # the busiest other processes, by name
    assert "taskset" in others.fix


def test_the_command_exits_1_when_something_costs_and_prints_json(monkeypatch, capsys):
    monkeypatch.setattr(ms, "machine_checks", lambda threads, sample_s, time_once: [
        ms.Check("turbo", "on", ms.COSTS, "it moves", "turn it off"),
        ms.Check("SMT", "off", ms.OK)])
    code, out, _ = run_main(["doctor", "--json"], capsys)
    assert code == 1
    assert json.loads(out)["costs"] == ["turbo"]
    code, out, _ = run_main(["doctor"], capsys)
    assert code == 1 and "costs: it moves" in out and "fix: turn it off" in out
    assert "1 of 2 items cost stability: turbo" in out


def test_nothing_costly_exits_0(monkeypatch, capsys):
    monkeypatch.setattr(ms, "machine_checks",
                        lambda threads, sample_s, time_once: [ms.Check("SMT", "off", ms.OK)])
    code, out, _ = run_main(["doctor"], capsys)
    assert code == 0 and "0 of 1 items cost stability" in out


@pytest.mark.parametrize("bad", ["--sample=0", "--sample=soon", "--threads=0"])
def test_bad_flags_are_one_line(bad, capsys):
    code, _, err = run_main(["doctor", bad], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_a_saved_run_records_the_state_without_watching():
    snap = ms.snapshot(torch_threads=1)
    assert "other processes" not in snap
    assert snap["torch threads"]["status"] in (ms.OK, ms.COSTS)
