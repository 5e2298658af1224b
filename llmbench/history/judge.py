"""A whole history judged: every benchmark's change points and the newest run's verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from llmbench.errors import EXIT_OK, EXIT_REGRESSION
from llmbench.gate.compare import DEFAULT_ALPHA
from llmbench.gate.stats import threshold_for
from llmbench.history.changepoints import NewestVerdict, Shift, find_shifts, judge_newest
from llmbench.history.machine import all_benchmarks, control_ratio, machine_shares
from llmbench.history.series import History, Series


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
        """How much of the newest run's ratio to its level the other benchmarks share."""
        level = self.moves[self.level_start():-1]
        if not self.moves or not level:
            return None
        return math.exp(self.moves[-1] - sum(level) / len(level))

    def shift_run(self, shift: Shift) -> int:
        return self.series.points[shift.index].run

    def shift_commit(self, shift: Shift) -> str | None:
        return self.series.points[shift.index].commit

    def code_changed(self, shift: Shift) -> bool | None:
        """Whether any commit changed within a run of the shift (it may be placed a run off):
        False says the same code ran on both sides, so the machine moved, not the code;
        None when a run there recorded no commit."""
        around = self.series.points[max(0, shift.index - 2):shift.index + 2]
        commits = {p.commit for p in around}
        return None if None in commits else len(commits) > 1


@dataclass(frozen=True)
class HistoryResult:
    history: History
    results: tuple[SeriesResult, ...]
    alpha: float
    machine: SeriesResult | None = None  # all benchmarks together; None with too few

    @property
    def regressions(self) -> list[SeriesResult]:
        judged = [*self.results, *([self.machine] if self.machine else [])]
        return [r for r in judged if r.newest.verdict == "regression"]

    def control_move(self, shift: Shift) -> float | None:
        """The control workload's ratio across a shift of all benchmarks together (its
        neighbouring levels): near 1 says the code moved them, with it the machine."""
        if self.machine is None:
            return None
        points = self.machine.series.points
        bounds = [0, *(s.index for s in self.machine.shifts), len(points)]
        i = bounds.index(shift.index)
        before = [p.run for p in points[bounds[i - 1]:shift.index]]
        after = [p.run for p in points[shift.index:bounds[i + 1]]]
        return control_ratio(self.history, before, after)

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if self.regressions else EXIT_OK


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
    results = []
    for series in history.series:
        share = shares[series.key]
        results.append(_judge(series, series.log_medians - share.moves, history.newest,
                              limits[series.key], alpha, m, share.beta, tuple(share.moves)))
    machine = None
    if together is not None:
        machine = _judge(together, np.log([p.median_s for p in together.points]),
                         history.newest, min(limits.values()), alpha, m)
    return HistoryResult(history, tuple(results), alpha, machine)


def _judge(series: Series, x: np.ndarray, newest_run: int, limit: float, alpha: float, m: int,
           beta: float = 0.0, moves: tuple[float, ...] = ()) -> SeriesResult:
    shifts = find_shifts(x, alpha=alpha, benchmarks=m, threshold=limit)
    # The newest run is judged only if it is the newest run of the history: a benchmark
    # the newest run lacks keeps its shifts but has no newest verdict.
    if not series.points or series.points[-1].run != newest_run:
        newest = NewestVerdict("not in the newest run", 0)
    else:
        newest = judge_newest(x, shifts, threshold=limit, alpha=alpha, benchmarks=m)
    return SeriesResult(series, tuple(shifts), newest, limit, beta, moves)
