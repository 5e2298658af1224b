"""A whole history judged: every benchmark's change points and the newest run's verdict."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from llmbench.errors import Exit
from llmbench.gate.compare import DEFAULT_ALPHA
from llmbench.gate.stats import Verdict, threshold_for
from llmbench.history.changepoints import NewestVerdict, Shift, find_shifts, judge_newest
from llmbench.history.machine import (
    MachineShare,
    all_benchmarks,
    control_ratio,
    control_share,
    machine_shares,
    median_move,
)
from llmbench.history.series import History, Series, code_is_named


@dataclass(frozen=True)
class SeriesResult:
    series: Series
    shifts: tuple[Shift, ...]
    newest: NewestVerdict
    threshold: float
    beta: float = 0.0  # how closely it follows the other benchmarks (llmbench.history.machine)
    moves: tuple[float, ...] = field(default=(), repr=False)  # the machine's share, per point

    def level_start(self) -> int:
        return self.shifts[-1].index if self.shifts else 0

    def machine_ratio(self) -> float | None:
        """How much of the newest run's ratio to its level the machine's share accounts
        for (the other benchmarks', or for all benchmarks together the control's)."""
        level = self.moves[self.level_start():-1]
        if not self.moves or not level or self.newest.ratio is None:
            return None
        return math.exp(self.moves[-1] - sum(level) / len(level))

    def measured(self) -> tuple[float | None, float | None, float | None]:
        """The newest run's ratio to its level and the prediction interval, as measured: the
        verdict was reached without the machine's share, so all three move by that share."""
        v, share = self.newest, self.machine_ratio() or 1.0
        if v.ratio is None:
            return None, None, None
        return (v.ratio * share, v.low * share if v.low is not None else None,
                v.high * share if v.high is not None else None)

    def shift_run(self, shift: Shift) -> int:
        return self.series.points[shift.index].run

    def shift_commit(self, shift: Shift) -> str | None:
        return self.series.points[shift.index].commit

    def code_changed(self, shift: Shift) -> bool | None:
        """Whether any commit changed within a run of the shift (it may be placed a run off):
        False says the same code ran on both sides, so the machine moved, not the code;
        None when a run there recorded no commit, or ran uncommitted changes (then its
        commit does not name its code)."""
        around = self.series.points[max(0, shift.index - 2):shift.index + 2]
        commits = {p.commit for p in around}
        if not all(code_is_named(c) for c in commits):
            return None
        return len(commits) > 1


@dataclass(frozen=True)
class HistoryResult:
    history: History
    results: tuple[SeriesResult, ...]
    alpha: float
    machine: SeriesResult | None = None  # all benchmarks together; None with too few

    @property
    def regressions(self) -> list[SeriesResult]:
        judged = [*self.results, *([self.machine] if self.machine else [])]
        return [r for r in judged if r.newest.verdict is Verdict.REGRESSION]

    def control_move(self, shift: Shift) -> float | None:
        """The control workload's ratio across a shift of all benchmarks together (its
        neighbouring levels). Moving with them says the machine moved them; staying near 1
        points at code that touched every benchmark."""
        if self.machine is None:
            return None
        points = self.machine.series.points
        bounds = [0, *(s.index for s in self.machine.shifts), len(points)]
        i = bounds.index(shift.index)
        before = [p.run for p in points[bounds[i - 1]:shift.index]]
        after = [p.run for p in points[shift.index:bounds[i + 1]]]
        return control_ratio(self.history, before, after)

    def control_newest(self) -> float | None:
        """The control workload's ratio of the newest run to the runs of the newest level
        of all benchmarks together: what the machine alone did to the newest run."""
        if self.machine is None or len(self.machine.series.points) < 2:
            return None
        points = self.machine.series.points
        level = [p.run for p in points[self.machine.level_start():-1]]
        return control_ratio(self.history, level, [points[-1].run])

    @property
    def exit_code(self) -> int:
        return Exit.REGRESSION if self.regressions else Exit.OK


def judge_history(history: History, *, threshold: float | None = None,
                  alpha: float = DEFAULT_ALPHA) -> HistoryResult:
    """Change points and the newest run's verdict for every series, each after removing
    its share of what moved the whole machine, and for all benchmarks together; `alpha` is
    the false-alarm rate of the whole history (shared among its series)."""
    together = all_benchmarks(history)
    m = len(history.series) + (together is not None)
    shares = machine_shares(history)
    limits = {s.key: threshold if threshold is not None else threshold_for(s.name, s.group,
                                                                            history.device)
              for s in history.series}
    control_s = dict(zip(history.runs, history.control_s, strict=False))
    results = [_judge(series, shares[series.key], control_s, history.newest,
                      limits[series.key], alpha, m) for series in history.series]
    machine = None
    if together is not None:
        machine = _judge(together, control_share(history, together), control_s,
                         history.newest, min(limits.values()), alpha, m)
    return HistoryResult(history, tuple(results), alpha, machine)


def _beyond(move: float, direction: float, limit: float) -> bool:
    return move * direction > 0 and abs(move) > math.log1p(limit)


def _measured_too(raw: np.ndarray, control: np.ndarray, shifts: list[Shift],
                  limit: float) -> list[Shift]:
    """The shifts across which the measured medians moved the same way beyond the
    threshold too, against the control workload's move over the same runs (as measured
    where the runs have no control). A benchmark that the code left alone while it moved
    most of the others shows their move mirrored once their share is removed: its measured
    medians did not move, or moved with the machine, which the control saw. Not as
    measured alone: a machine that sped up as much would hide a real slowdown."""
    bounds = [0, *(s.index for s in shifts), raw.size]
    kept = []
    for i, shift in enumerate(shifts, start=1):
        before, after = slice(bounds[i - 1], shift.index), slice(shift.index, bounds[i + 1])
        measured = median_move(raw, before, after)
        machine = median_move(control, before, after)
        if _beyond(measured - (machine or 0.0), math.log(shift.ratio), limit):
            kept.append(shift)
    return kept


def _judge(series: Series, share: MachineShare, control_s: dict[int, float | None],
           newest_run: int, limit: float, alpha: float, m: int) -> SeriesResult:
    raw = series.log_medians
    control = np.log([control_s.get(p.run) or np.nan for p in series.points])
    x = raw - share.moves
    shifts = _measured_too(raw, control,
                           find_shifts(x, alpha=alpha, benchmarks=m, threshold=limit), limit)
    # The newest run is judged only if it is the newest run of the history: a benchmark
    # the newest run lacks keeps its shifts but has no newest verdict.
    if not series.points or series.points[-1].run != newest_run:
        newest = NewestVerdict(Verdict.INCONCLUSIVE, 0, why="not in the newest run")
    else:
        newest = judge_newest(x, shifts, threshold=limit, alpha=alpha, benchmarks=m)
    result = SeriesResult(series, tuple(shifts), newest, limit, share.beta,
                          tuple(float(v) for v in share.moves))
    if newest.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT):
        # As for change points: beyond the threshold against the control's move.
        start = result.level_start()
        measured = math.log(newest.ratio * (result.machine_ratio() or 1.0))
        machine = median_move(control, slice(start, -1), slice(-1, None)) or 0.0
        direction = 1.0 if newest.verdict is Verdict.REGRESSION else -1.0
        if not _beyond(measured - machine, direction, limit):
            result = dataclasses.replace(result, newest=dataclasses.replace(
                newest, verdict=Verdict.UNCHANGED))
    return result
