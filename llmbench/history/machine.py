"""The machine's share of a history: how far each run moved with the other benchmarks.

A shared machine speeds up and slows down over hours, and every benchmark feels it at once.
In a history of unchanged runs on a shared VM, the benchmarks' run effects correlated
strongly and drifted together, far enough that, judged one series at a time, most windows
of a dozen runs showed a change point (figures: docs/measurements/2026-12-01-history.md).
A change of code, by contrast, usually moves some benchmarks and leaves others alone, and
never moves the control workload (fixed pure-torch code timed in every run,
`llmbench.bench.control`).

So each benchmark is judged after removing what it shares with the rest of the run:

- Its *reference* in run r is the median, over the other benchmarks and the control, of how
  far each sat from its own history's median (logs, so a ratio). Leaving the benchmark out
  keeps its own shift out of its reference; the control keeps a reference even where
  every benchmark moved.
- How closely it follows that reference, `beta`, is the least-squares slope over the
  history, clipped to [0, 1], where the two correlate significantly, and 0 where they do
  not: then nothing is removed (nor any noise added). Where they move as one, it is 1.
- Change points and the newest run's verdict are found on log median - beta x reference.

A change that slows every benchmark alike is then removed from each of them, so the
median of all benchmarks is judged as a series of its own, "all benchmarks together", after
removing its share of the control's moves (the same slope rule): what is left there is code
that touched everything, or a move of the machine that the control does not feel.

A reference moves with the code too when the code moves most benchmarks, and a benchmark
it did not touch then shows the mirror image. So `judge` keeps a change point or a
regression only where the measured medians moved beyond the threshold as well.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
from scipy import stats

from llmbench.history.series import History, Point, Series

# A reference is a median of at least this many other series in that run; with fewer
# (a history of two benchmarks and no control) one odd run would move it, so no share is
# removed.
MIN_REFERENCES = 3
FOLLOW_ALPHA = 0.05  # a benchmark follows the others only if it correlates with them at this


@dataclass(frozen=True)
class MachineShare:
    beta: float  # how closely the benchmark follows the others: 0 (not at all) to 1
    moves: np.ndarray  # beta x reference, one per point of the series (logs)


def _centred(values: np.ndarray) -> np.ndarray:
    """Each row's distance from its own median (NaN where a run lacks it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a row with nothing stays NaN
        return values - np.nanmedian(values, axis=-1, keepdims=True)


def _median_of_enough(rows: np.ndarray) -> np.ndarray:
    """Per column, the median of the rows present there; NaN with fewer than MIN_REFERENCES."""
    present = np.sum(~np.isnan(rows), axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a column with nothing: NaN
        median = np.nanmedian(rows, axis=0) if rows.size else np.full(rows.shape[1], np.nan)
    return np.where(present >= MIN_REFERENCES, median, np.nan)


def _slope(reference: np.ndarray, own: np.ndarray) -> float:
    """How closely `own` follows `reference`: the least-squares slope of their run-to-run
    differences, through the origin, clipped to [0, 1] (a benchmark cannot follow the
    machine backwards, nor more than fully); 0 unless it is significant at FOLLOW_ALPHA
    (one-sided t), since over a dozen runs of independent noise the slope alone often
    comes out near 1 by chance, and removing it would add noise.

    Differences, not levels: a step of the code is one difference among many there, while
    on levels it would pull the slope towards a drift that happened to span it. Through
    the origin, because a steady drift is part of what the benchmark shares: an intercept
    would take it away from the slope."""
    both = ~np.isnan(reference) & ~np.isnan(own)
    ref, y = np.diff(reference[both]), np.diff(own[both])
    n = ref.size
    sxx = float(np.dot(ref, ref))
    if n < 4 or sxx == 0.0:
        return 0.0
    slope = float(np.dot(ref, y)) / sxx
    residual = y - slope * ref
    se = math.sqrt(float(np.dot(residual, residual)) / (n - 1) / sxx)
    if slope <= 0 or (se > 0 and stats.t.sf(slope / se, n - 1) > FOLLOW_ALPHA):
        return 0.0
    return min(slope, 1.0)


def _share(reference: np.ndarray, own: np.ndarray) -> MachineShare:
    """`own`'s share of `reference`, aligned; none unless every run has a reference, so
    that no run is judged raw beside others judged without the machine's share."""
    if np.isnan(reference).any():
        return MachineShare(0.0, np.zeros_like(own))
    beta = _slope(reference, own)
    return MachineShare(beta, beta * reference)


def machine_shares(history: History) -> dict[str, MachineShare]:
    """Each series' share of the machine's moves, by series key; see the module docstring."""
    centred = _centred(np.vstack([history.log_median_matrix, history.control_logs]))
    column = {run: i for i, run in enumerate(history.runs)}
    shares = {}
    for row, series in enumerate(history.series):
        reference = _median_of_enough(np.delete(centred, row, axis=0))
        at = [column[p.run] for p in series.points]
        shares[series.key] = _share(reference[at], centred[row][at])
    return shares


def control_share(history: History, together: Series) -> MachineShare:
    """All benchmarks together's share of the control workload's moves: what the machine
    alone did to them, as far as the control feels it."""
    column = {run: i for i, run in enumerate(history.runs)}
    at = [column[p.run] for p in together.points]
    return _share(_centred(history.control_logs)[at], together.log_medians)


def all_benchmarks(history: History) -> Series | None:
    """The median of every benchmark's distance from its own history's median, per run, as
    a series of relative levels (1.0 = the history's usual speed); None with fewer than
    MIN_REFERENCES benchmarks."""
    if len(history.series) < MIN_REFERENCES:
        return None
    level = _median_of_enough(_centred(history.log_median_matrix))
    first = {}
    for series in history.series:
        for p in series.points:
            first.setdefault(p.run, p)
    points = tuple(Point(run=run, commit=first[run].commit, when=first[run].when,
                         median_s=float(np.exp(value)), low_s=float(np.exp(value)),
                         high_s=float(np.exp(value)))
                   for run, value in zip(history.runs, level, strict=True)
                   if not np.isnan(value) and run in first)
    return Series("all benchmarks together", "all benchmarks together", None, points)


def median_move(logs: np.ndarray, before, after) -> float | None:
    """How far the median of `logs[after]` sits from that of `logs[before]` (any numpy
    index: slices or positions), NaNs left out; None where either side has nothing."""
    a, b = logs[before], logs[after]
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    return float(np.median(b) - np.median(a)) if a.size and b.size else None


def control_ratio(history: History, before: Collection[int],
                  after: Collection[int]) -> float | None:
    """The control's median over the runs numbered `after` / over those numbered `before`;
    None where either side has no control."""
    column = {run: i for i, run in enumerate(history.runs)}
    move = median_move(history.control_logs, [column[r] for r in before if r in column],
                       [column[r] for r in after if r in column])
    return None if move is None else float(np.exp(move))
