"""The commits to bisect from a change point (`llmbench bisect --change-point`): the newest
change point of one benchmark's history, read as GOOD and BAD revisions.

A change point is placed at the first run of the new level, but it may be placed a run off
(`SeriesResult.code_changed` looks that far), so the range reaches one run further each way:
GOOD is the commit of the run two before the change point, BAD the commit of the run after
it. Bisect's first step pairs GOOD against BAD, so a range wider than needed costs a step,
never the answer. Refused, in one line, when there is nothing a bisect could find: no change
point, one that made the benchmark faster, one where the same code ran on both sides (the
machine moved), or runs that do not name their code (no commit, or uncommitted changes).
"""

from __future__ import annotations

from dataclasses import dataclass

from llmbench.errors import UserError
from llmbench.history.judge import HistoryResult, SeriesResult
from llmbench.history.series import code_is_named


@dataclass(frozen=True)
class BisectRange:
    good: str  # short commit ids, as the runs recorded them
    bad: str
    key: str  # the benchmark's pytest node id: the selection to bisect on
    name: str
    good_run: int
    bad_run: int
    ratio: float  # the change point's move


def _series(result: HistoryResult, benchmark: str) -> SeriesResult:
    exact = [r for r in result.results if benchmark in (r.series.name, r.series.key)]
    found = exact or [r for r in result.results if benchmark in r.series.name]
    if len(found) != 1:
        names = ", ".join(r.series.name for r in found[:6]) or "none"
        raise UserError(f"{benchmark!r} names {len(found)} benchmarks of {result.history.folder}"
                        f" ({names}): name exactly one")
    return found[0]


def bisect_range(result: HistoryResult, benchmark: str) -> BisectRange:
    """GOOD and BAD around the newest change point of `benchmark` (its name, node id, or a
    part of its name that only it has)."""
    series = _series(result, benchmark)
    name = series.series.name
    if not series.shifts:
        raise UserError(f"{name} has no change point in {result.history.folder}: nothing to "
                        "bisect (bisect two revisions with `llmbench bisect GOOD BAD`)")
    shift = series.shifts[-1]
    if shift.ratio < 1:
        raise UserError(f"the newest change point of {name} (run "
                        f"{series.shift_run(shift):04d}) made it faster (x{shift.ratio:.3f}): "
                        "bisect finds slowdowns")
    changed = series.code_changed(shift)
    if changed is False:
        raise UserError(f"the same code ran on both sides of {name}'s newest change point (run "
                        f"{series.shift_run(shift):04d}): the machine moved, not the code")
    points = series.series.points
    before, after = points[max(0, shift.index - 2)], points[min(len(points) - 1,
                                                                 shift.index + 1)]
    if changed is None or not (code_is_named(before.commit) and code_is_named(after.commit)):
        raise UserError(f"the runs around {name}'s newest change point do not name their code "
                        "(a run without a commit, or with uncommitted changes): bisect "
                        "`llmbench bisect GOOD BAD` with the commits you know")
    # A run's code may carry a slowdown injected on top of its commit (`+slow ...`): the
    # commit is what a bisect can check out.
    good, bad = (point.commit.partition("+")[0] for point in (before, after))
    if good == bad:
        raise UserError(f"the same commit ran on both sides of {name}'s newest change point "
                        f"(run {series.shift_run(shift):04d}), with another injected slowdown: "
                        "no commit to bisect")
    return BisectRange(good, bad, series.series.key, name, before.run, after.run,
                       shift.ratio)
