"""Both sides of a paired A/B on the same CPUs.

The two sides take turns, so they can share CPUs without ever timing each other. Left to the
scheduler, each process settles on whichever CPU it was given and keeps its own caches warm
there, and that differs from process to process and holds for the whole process: ABBA
order cannot share it out, and an A/A of identical code with `--threads 1` on two CPUs
confirmed slowdowns and speedups that were only placements. Started on one CPU set, with
the same caches and the same CPU to lose them to, identical copies agree (the figures:
docs/measurements/2026-12-03-stable-measurements.md).

The set is the last `--threads` CPUs this process may use (the first CPU takes most of the
interrupts); without `--threads`, or with as many threads as CPUs, torch uses every CPU and
there is nothing to choose. The set holds for each worker's whole life: collection (both
sides at once), compiles and, in the server benchmarks, the server and its client share it,
on both sides alike. Not covered: a suite whose torch picks fewer threads than CPUs by
itself (torch's default where a core has two hardware threads), with no `--threads`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence


def threads_of(pytest_args: Sequence[str]) -> int | None:
    """The suite's `--threads N` (or `--threads=N`) in `pytest_args`, the last one as
    pytest reads it; None where absent or not a number (the suite refuses that itself)."""
    found = None
    for at, arg in enumerate(pytest_args):
        if arg.startswith("--threads="):
            found = arg.split("=", 1)[1]
        elif arg == "--threads" and at + 1 < len(pytest_args):
            found = pytest_args[at + 1]
    return int(found) if found is not None and found.isascii() and found.isdecimal() else None


def shared_cpus(pytest_args: Sequence[str]) -> frozenset[int] | None:
    """The CPUs both sides start on, or None where they may use every CPU (or where the OS
    has no CPU affinity, as on macOS)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    threads = threads_of(pytest_args)
    if threads is None or threads < 1 or threads >= len(allowed):
        return None
    return frozenset(allowed[-threads:])


@contextlib.contextmanager
def children_on(cpus: frozenset[int] | None) -> Iterator[None]:
    """Processes started inside start on `cpus` (None: where this thread may run). A child
    inherits the affinity of the thread that starts it, so this thread's is set and then
    restored: nothing in the child has to ask for it, REV's code included."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
