"""Whether a timed region had the machine to itself, from the kernel's CPU accounting.

torch's CPU kernels run on OpenMP, whose barriers make every parallel region wait for its
slowest thread: another process that takes a few percent of one CPU, even at the lowest
priority, can multiply a round's time, and the round's time alone cannot tell that apart
from a slow process. The kernel can. Around each window (a round) this reads:

- `/proc/stat`, each CPU this process may run on: the time those CPUs were busy, and the
  time the hypervisor took them for other guests (steal);
- `/proc/self/stat`: the CPU time this process's threads ran, with that of the processes
  it started (its live descendants' from their own `/proc/PID/stat`, found through
  `/proc/PID/task/TID/children`; those that ended and were waited for, from its children's
  fields): a load client the benchmark spawns, or a compile worker, is its work, not a
  co-runner.

Both count in clock ticks, sampled alike, so the busy time less this process's is what other
processes (and the kernel working for them) ran on our CPUs. A window is *disturbed* when
others and steal together took more than `share` of its CPU capacity (wall time times CPUs),
and at least `MIN_TICKS` ticks of it (a window is read at its two edges, so one tick either
way is the reading, not a disturbance). Our own threads' share of the wall time is kept
too: it says whether the process's threads ran when the round did.

This module uses the standard library only: `llmbench ab` copies it beside its pair worker
into both sides of an A/B, whose own revision may predate it.
"""

from __future__ import annotations

import glob
import os
import time
from dataclasses import dataclass

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
MIN_TICKS = 2
DEFAULT_SHARE = 0.03  # others' share of our CPUs' capacity beyond which a round is disturbed
# Sets the default of the suite's and `llmbench ab`'s --disturbed-share, e.g. for a test
# session whose parallel workers disturb every round they time beside each other.
SHARE_ENV = "LLMBENCH_DISTURBED_SHARE"


def default_share_text() -> str:
    """The flags' default, as they parse it: $LLMBENCH_DISTURBED_SHARE, else 3%."""
    return os.environ.get(SHARE_ENV) or f"{DEFAULT_SHARE:.0%}"


def default_share() -> float:
    """The same default as a fraction, for callers of the library that pass no share (a
    malformed variable is the flags' to refuse, in one line; here it is the default)."""
    text = default_share_text().strip()
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        return DEFAULT_SHARE
    return value if value > 0 else DEFAULT_SHARE


@dataclass(frozen=True)
class Reading:
    """The counters at one moment (ticks; None where the platform has no /proc)."""

    busy: int
    steal: int
    own: int  # this process and its descendants


@dataclass(frozen=True)
class Window:
    """What the machine did between two readings."""

    wall_s: float
    cpus: int
    others_s: float  # CPU time other processes ran on our CPUs
    steal_s: float  # CPU time the hypervisor gave away
    own_s: float  # CPU time this process's threads (and its descendants) ran

    @property
    def capacity_s(self) -> float:
        return self.wall_s * self.cpus

    def others_share(self) -> float:
        """Others and steal, as a share of our CPUs' capacity over the window (at most 1:
        a short window's ticks can count past it)."""
        if self.capacity_s <= 0:
            return 0.0
        return min(1.0, (self.others_s + self.steal_s) / self.capacity_s)

    def disturbing_share(self) -> float:
        """`others_share`, or 0 when others took fewer than `MIN_TICKS` ticks: the reading's
        own edges, not a disturbance. The one rule, for rounds and for pairs alike."""
        taken = self.others_s + self.steal_s
        return self.others_share() if taken >= MIN_TICKS * TICK_S else 0.0

    def is_disturbed(self, share: float = DEFAULT_SHARE) -> bool:
        return self.disturbing_share() > share

    def to_json(self) -> dict:
        return {"wall_s": round(self.wall_s, 6), "others_s": round(self.others_s, 3),
                "steal_s": round(self.steal_s, 3), "own_s": round(self.own_s, 3)}


def our_cpus() -> frozenset[int]:
    """The CPUs this process may run on."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return frozenset(range(os.cpu_count() or 1))


def is_available() -> bool:
    """Whether this platform keeps the counters (Linux's /proc)."""
    return read() is not None


def read(cpus: frozenset[int] | None = None) -> Reading | None:
    """The counters now, summed over `cpus` (default: ours); None without /proc."""
    cpus = our_cpus() if cpus is None else cpus
    # A child waited for in the instant between these two reads is counted twice at this
    # edge; a round waits for the children it starts before it ends, not at its edges.
    descendants = descendants_ticks(os.getpid())
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            stat = fh.read()
        with open("/proc/self/stat", encoding="ascii") as fh:
            own = fh.read()
    except OSError:
        return None
    busy = steal = 0
    for line in stat.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        # user nice system idle iowait irq softirq steal guest guest_nice (guest time is
        # already in user and nice)
        values = [int(v) for v in rest.split()]
        busy += values[0] + values[1] + values[2] + values[5] + values[6]
        steal += values[7] if len(values) > 7 else 0
    return Reading(busy=busy, steal=steal,
                   own=cpu_ticks(own, waited_children=True) + descendants)


def cpu_ticks(stat: str, waited_children: bool = False) -> int:
    """A process's CPU time (user + system, all its threads) in ticks, from the text of its
    /proc/PID/stat, with `waited_children` that of its children that ended and were waited
    for. comm, field 2, may hold spaces and parentheses: fields are counted after its
    closing one."""
    fields = stat.rpartition(")")[2].split()
    ticks = int(fields[11]) + int(fields[12])
    return ticks + int(fields[13]) + int(fields[14]) if waited_children else ticks


def _children(pid: int) -> list[int]:
    found = []
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            with open(path, encoding="ascii") as fh:
                found += [int(child) for child in fh.read().split()]
        except OSError:
            continue  # a thread that ended while it was listed
    return found


def descendants_ticks(pid: int) -> int:
    """The CPU time of `pid`'s live descendants in ticks, each with the children it waited
    for; 0 where the kernel lists no children."""
    total = 0
    for child in _children(pid):
        try:
            with open(f"/proc/{child}/stat", encoding="ascii") as fh:
                total += cpu_ticks(fh.read(), waited_children=True)
        except (OSError, IndexError, ValueError):
            continue  # it ended between the listing and the read
        total += descendants_ticks(child)
    return total


def window(before: Reading, after: Reading, wall_s: float, cpus: int) -> Window:
    """The window between two readings of `cpus` CPUs, `wall_s` apart."""
    own = max(0, after.own - before.own)
    others = max(0, (after.busy - before.busy) - own)
    return Window(wall_s=wall_s, cpus=cpus, others_s=others * TICK_S,
                  steal_s=max(0, after.steal - before.steal) * TICK_S, own_s=own * TICK_S)


class Rounds:
    """The windows of a sequence of rounds: `open()` just before a round starts, `close()`
    just after it ends (a benchmark's setup and teardown), one window per round."""

    def __init__(self, share: float = DEFAULT_SHARE):
        self.share = share
        self.cpus = our_cpus()
        self.windows: list[Window | None] = []  # None: this platform keeps no counters
        self._opened: tuple[Reading | None, float] | None = None

    def open(self) -> None:
        self._opened = (read(self.cpus), time.perf_counter())

    def close(self) -> None:
        assert self._opened is not None, "close() without open()"
        before, started = self._opened
        after = read(self.cpus) if before is not None else None
        self.windows.append(None if after is None else window(
            before, after, time.perf_counter() - started, len(self.cpus)))
        self._opened = None

    def disturbed(self, first: int = 0) -> list[int]:
        """Indices, counted from window `first`, of the disturbed windows."""
        return [i for i, w in enumerate(self.windows[first:])
                if w is not None and w.is_disturbed(self.share)]
