"""History: every saved run of one environment, its change points and the newest run's
verdict (`llmbench history`); from a change point, the range `llmbench bisect` searches
(`bisect_range`), and a saved bisection in words (`bisection`).

May import: `llmbench.runs`, `llmbench.gate` (thresholds, table formatting), `llmbench.errors`.
"""

from llmbench.history.bisect_range import BisectRange, bisect_range
from llmbench.history.changepoints import (
    MIN_SEGMENT,
    NewestVerdict,
    Shift,
    find_shifts,
    judge_newest,
)
from llmbench.history.judge import HistoryResult, SeriesResult, judge_history
from llmbench.history.render import render
from llmbench.history.series import MIN_RUNS, History, Point, Series, load_history

__all__ = ["MIN_RUNS", "MIN_SEGMENT", "BisectRange", "History", "HistoryResult",
           "NewestVerdict", "Point", "Series", "SeriesResult", "Shift", "bisect_range",
           "find_shifts", "judge_history", "judge_newest", "load_history", "render"]
