"""Disturbed rounds: the kernel's CPU accounting around each round says whether other work
shared the machine (`llmbench.engine.disturbance`); such a round is measured again and left
out of every verdict, and the run counts it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from llmbench.engine import disturbance as d

TICK = d.TICK_S
pytestmark = pytest.mark.skipif(not d.is_available(), reason="no /proc CPU accounting here")


def _window(busy: int, own: int, steal: int = 0, wall_s: float = 1.0, cpus: int = 2):
    return d.window(d.Reading(busy=0, steal=0, own=0), d.Reading(busy=busy, steal=steal,
                                                                   own=own), wall_s, cpus)


def test_others_are_our_cpus_busy_time_less_our_own():
    w = _window(busy=150, own=140, steal=4)
    assert w.others_s == pytest.approx(10 * TICK)
    assert w.steal_s == pytest.approx(4 * TICK)
    assert w.own_s == pytest.approx(140 * TICK)
    assert w.others_share() == pytest.approx(14 * TICK / 2.0)
    assert w.disturbing_share() == w.others_share()


def test_a_short_windows_ticks_never_count_past_the_capacity():
    w = _window(busy=3, own=0, wall_s=0.005)  # 3 ticks in 10 ms of capacity
    assert w.others_share() == 1.0 and not w.is_disturbed(1.0)
    assert _window(busy=1, own=0, wall_s=0.005).disturbing_share() == 0.0  # one tick: edges


@pytest.mark.parametrize("busy, own, steal, wall_s, disturbed", [
    (200, 200, 0, 1.0, False),   # ours alone
    (200, 195, 0, 1.0, False),   # 5 ticks of 200: 2.5%, within 3%
    (200, 190, 0, 1.0, True),    # 10 ticks: 5%
    (200, 200, 10, 1.0, True),   # the hypervisor took it: steal counts too
    (6, 5, 0, 0.03, False),      # one tick in a short round: the edges of the reading
    (6, 4, 0, 0.03, True),       # two ticks of six: a third of the round
])
def test_a_round_is_disturbed_beyond_the_share_and_a_tick_either_way(busy, own, steal, wall_s,
                                                                     disturbed):
    assert _window(busy, own, steal, wall_s).is_disturbed() is disturbed


def test_a_higher_share_keeps_more_rounds():
    w = _window(busy=200, own=190)
    assert w.is_disturbed(0.03) and not w.is_disturbed(0.10)


def test_reading_parses_this_machines_counters():
    before = d.read()
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:  # 0.3 s of our own CPU time
        pass
    after = d.read()
    assert after.busy >= before.busy and after.steal >= before.steal
    assert (after.own - before.own) * TICK >= 0.3 - 2 * TICK


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        return d.cpu_ticks(fh.read()) * TICK


SPIN = "while True: pass"


def _stranger(code: str) -> int:
    """The pid of a Python process running `code` that is no descendant of ours: started by
    a shell that exits at once, as another user's job would be."""
    shell = subprocess.run(["sh", "-c", f'"{sys.executable}" -c "{code}" >/dev/null 2>&1 & '
                            "echo $!"], capture_output=True, text=True, check=True)
    return int(shell.stdout)


def _burn(seconds: float) -> list[str]:
    return [sys.executable, "-c", "import time\nt = time.process_time() + "
            f"{seconds}\nwhile time.process_time() < t: pass"]


def test_a_co_runner_is_seen():
    """A planted co-runner: a busy loop on our CPUs while a round runs. Whatever else the
    machine does (the other test workers), the window must count at least the co-runner's
    CPU time as others', and the round as disturbed. (At nice 19 beside busy test workers
    it would hardly run; docs/measurements/2026-12-03-stable-measurements.md shows one at
    nice 19 beside the suite.)"""
    spinner = _stranger(SPIN)
    try:
        time.sleep(0.2)
        started = _cpu_s(spinner)
        rounds = d.Rounds()
        rounds.open()
        deadline = time.perf_counter() + 1.0
        while time.perf_counter() < deadline:
            pass
        rounds.close()
        ran = _cpu_s(spinner) - started
    finally:
        os.kill(spinner, signal.SIGKILL)
    (w,) = rounds.windows
    assert ran > 0.02, "the co-runner never ran"
    assert w.others_s >= ran - 3 * TICK
    assert rounds.disturbed() == [0]


def test_the_processes_we_start_are_ours_not_others():
    """A child that works through a window (a load client the benchmark spawns), one that
    ends and is waited for inside it, and a grandchild: their CPU time is ours."""
    rounds = d.Rounds()
    live = subprocess.Popen(_burn(5.0))
    try:
        time.sleep(0.2)
        rounds.open()
        live_before = _cpu_s(live.pid)
        subprocess.run(_burn(0.3), check=True)  # a child that ends inside the window
        # a grandchild, waited for by its parent inside the window
        subprocess.run([sys.executable, "-c", "import subprocess; "
                        f"subprocess.run({_burn(0.3)!r}, check=True)"], check=True)
        time.sleep(0.3)
        live_ran = _cpu_s(live.pid) - live_before
        rounds.close()
    finally:
        live.kill()
        live.wait()
    (w,) = rounds.windows
    assert live_ran > 0.1, "the live child never ran"
    # Without the children our own threads, which mostly waited, would be all there is.
    assert w.own_s >= 0.6 + live_ran - 4 * TICK


def test_the_default_share_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(d.SHARE_ENV, raising=False)
    assert d.default_share_text() == "3%"
    monkeypatch.setenv(d.SHARE_ENV, "100%")
    assert d.default_share_text() == "100%"


def test_rounds_count_from_the_first_timed_one():
    rounds = d.Rounds()
    rounds.windows = [_window(200, 100), _window(200, 200), _window(200, 150), None]
    assert rounds.disturbed() == [0, 2]
    assert rounds.disturbed(first=1) == [1]  # the first window was a warm-up round


def test_our_cpus_are_those_we_may_run_on():
    assert d.our_cpus() == frozenset(os.sched_getaffinity(0))
