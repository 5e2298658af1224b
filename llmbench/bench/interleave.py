"""Rounds spread across the whole run: every case's rounds taken in passes over all cases.

A case whose rounds run one after another samples the machine for a few seconds. On a shared
host the machine's speed moves over minutes (docs/measurements/2026-12-05-interleaved-rounds.md),
so such a case's median inherits whichever minute it ran in, and two runs of one code differ
by it, each case by its own amount: its rounds cannot see it. Taken in passes, one share of
every case's rounds per pass, each case samples the whole run, and what is left of the
machine's moves is the run's own level, shared by every case.

How: a case times its first share when pytest runs it, with its checks, its memory round
and its counted work, and leaves the rest (`Deferred`) to the session's `Interleaver`.
At the last case's teardown, while the session's fixtures (the warmed model, the live server)
still stand, the interleaver runs the remaining passes, one share of each case in the order
pytest ran them, then finishes each case: its disturbed rounds measured again, every round
checked, its figures written. A case whose later rounds fail their check is kept out of the
saved run and fails the session, naming it.

Off (one pass) under `llmbench ab`, whose pairing takes turns round by round itself, and where
pytest-benchmark does not time (`--benchmark-disable`, xdist).
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import pytest

from llmbench.bench.settings import SETTINGS_KEY


class Deferred(Protocol):
    """A case whose later shares of rounds wait for the passes."""

    name: str
    shares: tuple[int, ...]  # rounds per pass; the first already ran

    def more(self, rounds: int) -> None: ...

    def finish(self) -> None: ...

    def abandon(self) -> None: ...


def shares(rounds: int, passes: int) -> tuple[int, ...]:
    """`rounds` split over at most `passes` passes, the larger shares first: 10 over 10 is
    one a pass, 15 over 10 is 2 in five passes and 1 in five, 3 over 10 is three passes."""
    passes = max(1, min(passes, rounds))
    base, extra = divmod(rounds, passes)
    return tuple(base + (1 if i < extra else 0) for i in range(passes))


@dataclass
class Interleaver:
    """The session's deferred cases, run in passes at the last case's teardown."""

    passes: int
    after_round: Callable[[], None] = lambda: None  # the control workload, between cases
    cases: list[Deferred] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.passes > 1

    def add(self, case: Deferred) -> None:
        self.cases.append(case)

    def run(self, log: Callable[[str], None] = lambda line: None) -> None:
        """The passes after the first, then every case finished. A case that fails is
        abandoned (kept out of the saved run) and named in `failures`."""
        cases, self.cases = self.cases, []
        if not cases:
            return
        started = time.perf_counter()
        broken: set[str] = set()
        total = max(len(c.shares) for c in cases)
        log(f"llmbench: passes 2-{total} of {total} over {len(cases)} case(s), a share of "
            "each one's rounds a pass")
        for index in range(1, total):
            for case in cases:
                if index < len(case.shares) and case.name not in broken:
                    share = case.shares[index]
                    if self._step(case, lambda c=case, n=share: c.more(n), broken):
                        self.after_round()
        for case in cases:
            if case.name not in broken:
                self._step(case, case.finish, broken)
        log(f"llmbench: passes done in {time.perf_counter() - started:.0f} s")

    def _step(self, case: Deferred, action: Callable[[], None], broken: set[str]) -> bool:
        try:
            action()
        except (AssertionError, pytest.fail.Exception, RuntimeError, ValueError) as exc:
            case.abandon()
            broken.add(case.name)
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            self.failures.append(f"{case.name}: {detail}")
            return False
        return True

    def abandon_unfinished(self) -> list[str]:
        """Cases whose passes never ran (the session stopped early: -x, an interrupt):
        kept out of the saved run, their rounds being only the first share."""
        names = [c.name for c in self.cases]
        for case in self.cases:
            case.abandon()
        self.cases = []
        return names


INTERLEAVER_KEY = pytest.StashKey[Interleaver]()


def _timing(config: pytest.Config) -> bool:
    session = getattr(config, "_benchmarksession", None)
    return bool(session is not None and not session.disabled)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """One interleaver per session, after the record (whose control workload it runs)."""
    from llmbench.ab.pair_worker import ADDRESS_ENV
    from llmbench.bench.record import RECORD_KEY

    settings = config.stash[SETTINGS_KEY]
    paired = ADDRESS_ENV in os.environ
    passes = settings.passes if _timing(config) and not paired else 1
    record = config.stash.get(RECORD_KEY, None)
    if record is not None:
        record.passes = len(shares(settings.rounds, passes))
    config.stash[INTERLEAVER_KEY] = Interleaver(
        passes, after_round=record.measure_control if record is not None else lambda: None)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """At the last case, before the session's fixtures are torn down: the other passes."""
    interleaver = item.config.stash.get(INTERLEAVER_KEY, None)
    if nextitem is None and interleaver is not None and interleaver.cases:
        reporter = item.config.pluginmanager.get_plugin("terminalreporter")

        def log(line: str) -> None:
            if reporter is not None:
                reporter.write_line(line)

        log("")
        interleaver.run(log)
    yield
    if nextitem is None and interleaver is not None and interleaver.failures:
        failures, interleaver.failures = interleaver.failures, []
        pytest.fail("a case's later rounds (taken in passes) failed, and its timing is not "
                    "saved:\n  " + "\n  ".join(failures), pytrace=False)


def finish_session(session: pytest.Session) -> None:
    """Before the run is judged and saved (the plugin's session end calls it first): no case
    with only part of its rounds in it."""
    interleaver = session.config.stash.get(INTERLEAVER_KEY, None)
    if interleaver is None:
        return
    left = interleaver.abandon_unfinished()
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if left and reporter is not None:
        reporter.write_line(f"llmbench: {len(left)} case(s) stopped before their later passes "
                            "and are not saved: " + ", ".join(left))
