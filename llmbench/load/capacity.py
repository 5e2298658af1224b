"""The highest arrival rate a server holds within its objectives: its capacity.

The search is GuideLLM's: from a starting rate, double while each level meets the
objectives (halve while it does not, until one does), then bisect between the highest rate
met and the lowest not met, geometrically, until they are within `tolerance` of each other.
Each rate is one open-loop level of the same seeded schedule shape. A level counts as met
only when every objective was met with 99% confidence (`objectives`): an uncertain level
counts as not met, so the capacity claimed is one the measurements support, never a guess
that happened to pass. The answer is the bracket [highest met, lowest not met]: the
capacity lies within it, as far as monotone latency lets a search say.

The search stops early, and says why, when its time budget would be overrun by the next
level (each level takes about requests / rate seconds, and as long again as the last
level took to drain its queue), when no rate down to 1/64 of the start was met, or when
the client could not keep the schedule of a level the server met: the client, not the
server, was then the bottleneck, and a higher rate would say nothing. A level the client
fell behind on and the server missed counts as missed: the server could not hold even the
lower rate it was offered (a client sharing the server's machine or process falls behind
most where the server is overloaded).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from llmbench.errors import UserError
from llmbench.load.objectives import MET
from llmbench.load.result import LoadResult

NARROW, BUDGET, NONE_MET, CLIENT_BEHIND = (
    "bracket narrow enough", "time budget spent", "no rate met the objectives",
    "the client could not keep the schedule")
LOWEST_START_FRACTION = 1 / 64


@dataclass(frozen=True)
class Search:
    """How to search: where to start, when the bracket is narrow enough, how long at most."""

    start_rate: float = 1.0
    tolerance: float = 0.10  # stop when lowest not met / highest met <= 1 + tolerance
    budget_s: float = 600.0

    def __post_init__(self) -> None:
        if not self.start_rate > 0 or not self.tolerance > 0 or not self.budget_s > 0:
            raise UserError("the capacity search needs a positive start rate, tolerance and "
                            "time budget")


@dataclass
class Capacity:
    """The search's answer: the bracket, every level it ran (in order), and why it ended."""

    met_rate: float | None = None  # the highest rate met: the capacity claimed
    missed_rate: float | None = None  # the lowest rate not met
    behind_rate: float | None = None  # the rate at which the client fell behind
    levels: list[LoadResult] = field(default_factory=list)
    stopped: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"capacity_rate": self.met_rate, "not_met_rate": self.missed_rate,
                "client_behind_rate": self.behind_rate,
                "stopped": self.stopped, "seconds": self.seconds,
                "rates_tried": [level.config.arrivals.rate for level in self.levels],
                "line": self.line()}

    def estimate_rate(self) -> float | None:
        """One rate for the capacity, inside the bracket [highest met, lowest not met]: where
        the first of the objectives reaches its limit, interpolated between the two levels'
        percentiles on log scales (so the estimate moves with the server, not with the grid
        of rates the search happened to try). The bracket's geometric middle where the level
        not met was within every limit (uncertain, or its queue grew); the highest rate met
        where nothing above it was missed (the client fell behind, or the budget ended the
        doubling). None when no rate was met."""
        if self.met_rate is None:
            return None
        if self.missed_rate is None:
            return self.met_rate
        met, missed = self._level_at(self.met_rate), self._level_at(self.missed_rate)
        fractions = [_crossing(m, x) for m, x in zip(_checks(met), _checks(missed), strict=True)
                     if m["metric"] == x["metric"]]
        fractions = [f for f in fractions if f is not None]
        fraction = min(fractions) if fractions else 0.5
        return math.exp(math.log(self.met_rate)
                        + fraction * (math.log(self.missed_rate) - math.log(self.met_rate)))

    def _level_at(self, rate: float) -> LoadResult:
        return next(level for level in reversed(self.levels)
                    if level.config.arrivals.rate == rate)

    def line(self) -> str:
        """The answer in one line."""
        took = f"{len(self.levels)} levels in {self.seconds:.0f} s"
        if self.met_rate is None:
            return f"capacity: NONE FOUND ({self.stopped}; {took})"
        if self.behind_rate is not None and self.missed_rate is None:
            return (f"capacity: at least {self.met_rate:.3g} req/s within the objectives "
                    f"(the client fell behind its schedule at {self.behind_rate:.3g} req/s, "
                    f"so higher rates say nothing of the server; try --workers; {took})")
        above = ("no rate above it was tried" if self.missed_rate is None
                 else f"not met at {self.missed_rate:.3g} req/s")
        return (f"capacity: {self.met_rate:.3g} req/s within the objectives ({above}; the "
                f"capacity lies in [{self.met_rate:.3g}, "
                f"{self.missed_rate if self.missed_rate is not None else math.inf:.3g}]; "
                f"{self.stopped}; {took})")


def _checks(level: LoadResult) -> list[dict]:
    summary = level.summary()["objectives"]
    return summary["checks"] if summary is not None else []


def _crossing(met: dict, missed: dict) -> float | None:
    """Where between two levels (0: the one met, 1: the one not met) one objective's
    percentile reaches its limit, on log scales; None where the level not met was within
    the limit or either percentile is unknown."""
    limit, low, high = met["limit_ms"], met["value_ms"], missed["value_ms"]
    if low is None or high is None or not 0 < low <= limit < high:
        return None
    return math.log(limit / low) / math.log(high / low)


def level_met(result: LoadResult) -> bool:
    summary = result.summary()["objectives"]
    return summary is not None and summary["verdict"] == MET


def find_capacity(run_level: Callable[[float], LoadResult], search: Search,
                  seconds_per_level: Callable[[float], float],
                  clock: Callable[[], float] = time.monotonic) -> Capacity:
    """Search as the module says. `run_level(rate)` runs one open-loop level with
    objectives; `seconds_per_level(rate)` estimates how long one takes, for the budget."""
    answer = Capacity()
    begin = clock()
    rate = search.start_rate
    drain = 0.0  # how long the last level ran past its schedule: queued requests ending
    while True:
        if clock() - begin + seconds_per_level(rate) + drain > search.budget_s and answer.levels:
            answer.stopped = BUDGET
            break
        result = run_level(rate)
        answer.levels.append(result)
        drain = max(result.duration_s - seconds_per_level(rate), 0.0)
        met = level_met(result)
        # A late client offered less than `rate`: a level it met says nothing of `rate`, but
        # one it missed was missed at less than `rate` already, and so at `rate` too.
        if not result.client_kept_schedule and met:
            answer.stopped, answer.behind_rate = CLIENT_BEHIND, rate
            break
        if met:
            answer.met_rate = rate
        else:
            answer.missed_rate = rate
        if answer.met_rate is None:
            if rate <= search.start_rate * LOWEST_START_FRACTION:
                answer.stopped = NONE_MET
                break
            rate /= 2
        elif answer.missed_rate is None:
            rate *= 2
        elif answer.missed_rate / answer.met_rate <= 1 + search.tolerance:
            answer.stopped = NARROW
            break
        else:
            rate = math.sqrt(answer.met_rate * answer.missed_rate)
    answer.seconds = clock() - begin
    return answer
