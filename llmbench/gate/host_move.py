"""The machine's move between two runs, measured by the pairs of a confirmation, and the
slower candidates its budget left out cleared by it.

A benchmark's stored ratio (candidate run's median over the baseline run's) is the code's
effect times the machine's move between the two runs times that benchmark's own noise
between runs. When the host changes speed between runs (a VM restarted onto another
physical host, a neighbour busy for an hour), every benchmark moves together, and a stored
comparison finds dozens of slower candidates, more than a confirmation's pairs can re-measure
in its budget: they were left "not confirmed" and failed the run.

A paired A/B measures the code's effect alone. So each candidate the confirmation paired
gives one reading of the machine's move: its stored ratio over its paired ratio, whatever the
code did to it. Their weighted mean (`measure`) is the move; each benchmark's noise around it
is its residual noise between runs (`noise.NoiseEstimate.residuals`: its spread once each
run's shared move is removed), plus its pairs' own. Where the readings scatter more than that
noise allows (the move was not one factor for all, or a reading was disturbed), every
variance is scaled by their excess scatter (Birge's ratio, as a meta-analysis whose studies
disagree more than their errors allow), so the test grows more careful, never less.

A candidate left without pairs is then judged on its stored ratio over the move, against its
residual noise and the move's own uncertainty (`clear`). This only clears: where the interval
lies below 1 + delta, a slowdown beyond the threshold is ruled out (not slower), at the
confirmation's unsplit alpha, as pairs clear a candidate. It never names a regression: a
stored ratio beyond the move could be a disturbance of one run, and only pairs condemn.

A slowdown the code made uniform is measured too: the pairs carry it, so the readings of the
move do not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

from llmbench.gate.noise import Spread

# Fewer readings than this leave the move's scatter, and so the test's care, unknown.
MIN_READINGS = 3
# A reading's pairs: fewer say too little of the code's effect on it.
MIN_PAIRS = 3


@dataclass(frozen=True)
class Reading:
    """One paired candidate's view of the machine's move, in log units."""

    name: str
    log_move: float  # ln(stored ratio) - ln(paired ratio)
    variance: float  # its residual noise between two runs plus its pairs' own


@dataclass(frozen=True)
class Move:
    """The machine's move between the two runs, from the paired candidates' readings."""

    log_move: float
    variance: float  # of log_move, the scatter's scale applied
    scale: float  # Birge's ratio: >= 1, how much more the readings scatter than expected
    readings: tuple[str, ...]

    @property
    def df(self) -> int:
        return len(self.readings) - 1

    @property
    def ratio(self) -> float:
        return math.exp(self.log_move)


@dataclass(frozen=True)
class Cleared:
    """A candidate without pairs judged on its stored ratio over the machine's move."""

    ratio: float
    ci_low: float
    ci_high: float
    not_slower: bool  # ci_high below 1 + delta


def reading(name: str, stored_ratio: float, pairs: Sequence[float], residual: Spread
            ) -> Reading | None:
    """The move one paired candidate sees; None with too few pairs. `pairs`: each pair's
    ln(candidate / baseline)."""
    d = np.asarray(pairs, float)
    if d.size < MIN_PAIRS or stored_ratio <= 0:
        return None
    pairs_variance = float(d.var(ddof=1)) / d.size
    # Two runs each drew their own noise around the move: twice a run's variance.
    return Reading(name, math.log(stored_ratio) - float(d.mean()),
                   2 * residual.sigma ** 2 + pairs_variance)


def measure(readings: Sequence[Reading]) -> Move | None:
    """The move, by inverse-variance weights; None with fewer than MIN_READINGS readings or
    one with no variance (synthetic runs: nothing to weigh by)."""
    if len(readings) < MIN_READINGS or any(r.variance <= 0 for r in readings):
        return None
    w = np.array([1 / r.variance for r in readings])
    x = np.array([r.log_move for r in readings])
    centre = float(np.sum(w * x) / np.sum(w))
    q = float(np.sum(w * (x - centre) ** 2))
    scale = max(1.0, q / (len(readings) - 1))
    return Move(centre, scale / float(np.sum(w)), scale, tuple(r.name for r in readings))


def clear(stored_ratio: float, residual: Spread, move: Move, threshold: float,
          alpha: float) -> Cleared:
    """A left-out candidate's ratio with the move taken out, and its interval at confidence
    1 - alpha: the residual noise of two runs (scaled as the readings' scatter says) and the
    move's own variance; Student's t on the fewer df of the two estimates."""
    centre = math.log(stored_ratio) - move.log_move
    se = math.sqrt(move.scale * 2 * residual.sigma ** 2 + move.variance)
    df = min(residual.df, move.df)
    q = float(scipy_stats.t.ppf(1 - alpha / 2, df))
    high = math.exp(centre + q * se)
    return Cleared(math.exp(centre), math.exp(centre - q * se), high, high < 1 + threshold)
