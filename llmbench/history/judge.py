"""A whole history judged: every benchmark's change points and the newest run's verdict."""

from __future__ import annotations

from dataclasses import dataclass

from llmbench.errors import EXIT_OK, EXIT_REGRESSION
from llmbench.gate.compare import DEFAULT_ALPHA
from llmbench.gate.stats import threshold_for
from llmbench.history.changepoints import NewestVerdict, Shift, find_shifts, judge_newest
from llmbench.history.series import History, Series


@dataclass(frozen=True)
class SeriesResult:
    series: Series
    shifts: tuple[Shift, ...]
    newest: NewestVerdict
    threshold: float

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

    @property
    def regressions(self) -> list[SeriesResult]:
        return [r for r in self.results if r.newest.verdict == "regression"]

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if self.regressions else EXIT_OK


def judge_history(history: History, *, threshold: float | None = None,
                  alpha: float = DEFAULT_ALPHA) -> HistoryResult:
    """Change points and the newest run's verdict for every series; `alpha` is the
    false-alarm rate of the whole history (shared among its benchmarks)."""
    m = len(history.series)
    results = []
    for series in history.series:
        x = series.log_medians
        limit = threshold if threshold is not None else threshold_for(series.name,
                                                                      series.group,
                                                                      history.device)
        shifts = find_shifts(x, alpha=alpha, benchmarks=m, threshold=limit)
        # The newest run is judged only if it is the newest run of the history: a benchmark
        # the newest run lacks keeps its shifts but has no newest verdict.
        if series.points[-1].run != history.newest:
            newest = NewestVerdict("not in the newest run", 0)
        else:
            newest = judge_newest(x, shifts, threshold=limit, alpha=alpha, benchmarks=m)
        results.append(SeriesResult(series, tuple(shifts), newest, limit))
    return HistoryResult(history, tuple(results), alpha)
