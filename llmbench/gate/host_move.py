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
noise allows (the move was not one factor for all, or a reading was disturbed), the excess is
estimated as one added variance, tau^2, as a random-effects meta-analysis does with studies
that disagree more than their errors allow (DerSimonian and Laird, 1986), and every
candidate's interval carries it: the test grows more careful, never less.

A candidate left without pairs is then judged on its stored ratio over the move, against its
residual noise, the readings' excess scatter and the move's own uncertainty (`clear`); one
the A/B paired without deciding it is judged on that and on its own pairs together, against
a move read without it. This only clears: where the interval
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
    """One paired candidate's view of the machine's move, in log units, and its pairs'
    own estimate of the code's effect."""

    name: str
    log_move: float  # ln(stored ratio) - the pairs' mean log-ratio
    variance: float  # its residual noise between two runs plus its pairs' own
    paired: float  # the pairs' mean log-ratio
    paired_variance: float


@dataclass(frozen=True)
class Move:
    """The machine's move between the two runs, from the paired candidates' readings."""

    log_move: float
    variance: float  # of log_move
    tau2: float  # the readings' scatter beyond their noise: the move is not one factor for all
    readings: tuple[str, ...]

    @property
    def df(self) -> int:
        return len(self.readings) - 1

    @property
    def ratio(self) -> float:
        return math.exp(self.log_move)


@dataclass(frozen=True)
class Cleared:
    """A candidate no pair decided judged on its stored ratio over the machine's move (and,
    where it has pairs, on them too)."""

    ratio: float
    ci_low: float
    ci_high: float
    not_slower: bool  # ci_high below 1 + delta
    move: float  # the move it was judged against (its own reading left out)


def reading(name: str, stored_ratio: float, pairs: Sequence[float], residual: Spread
            ) -> Reading | None:
    """The move one paired candidate sees; None with too few pairs or a ratio that is not a
    finite positive number. `pairs`: each pair's ln(candidate / baseline)."""
    d = np.asarray(pairs, float)
    if d.size < MIN_PAIRS or not (math.isfinite(stored_ratio) and stored_ratio > 0) \
            or not np.all(np.isfinite(d)):
        return None
    pairs_variance = float(d.var(ddof=1)) / d.size
    paired = float(d.mean())
    # Two runs each drew their own noise around the move: twice a run's variance.
    return Reading(name, math.log(stored_ratio) - paired,
                   2 * residual.sigma ** 2 + pairs_variance, paired, pairs_variance)


def measure(readings: Sequence[Reading]) -> Move | None:
    """The move: a random-effects mean of the readings (DerSimonian and Laird, 1986), their
    scatter beyond their own noise estimated as tau^2 and added to every reading's variance;
    None with fewer than MIN_READINGS usable readings (a reading with no variance, from
    synthetic runs, has nothing to weigh it by and is left out)."""
    usable = [r for r in readings if r.variance > 0 and math.isfinite(r.variance)
              and math.isfinite(r.log_move)]
    if len(usable) < MIN_READINGS:
        return None
    v = np.array([r.variance for r in usable])
    x = np.array([r.log_move for r in usable])
    w = 1 / v
    fixed = float(np.sum(w * x) / np.sum(w))
    q = float(np.sum(w * (x - fixed) ** 2))
    tau2 = max(0.0, (q - (len(usable) - 1)) / float(np.sum(w) - np.sum(w ** 2) / np.sum(w)))
    w = 1 / (v + tau2)
    return Move(float(np.sum(w * x) / np.sum(w)), 1 / float(np.sum(w)), tau2,
                tuple(r.name for r in usable))


def clear(stored_ratio: float, residual: Spread, move: Move, threshold: float,
          alpha: float, paired: tuple[float, float] | None = None) -> Cleared | None:
    """A candidate's ratio with the move taken out, and its interval at confidence
    1 - alpha: a prediction for one more benchmark, so its own residual noise of two runs,
    the readings' scatter beyond theirs (tau^2) and the move's variance; Student's t on the
    fewer df of the residual noise and the move (k - 2, as a random-effects prediction
    interval). `paired`: the candidate's own pairs (mean log-ratio, its variance), where it
    has some, weighed in with the stored evidence, so that pairs pointing past the
    threshold hold it back. None for a stored ratio that is no finite positive number."""
    if not (math.isfinite(stored_ratio) and stored_ratio > 0):
        return None
    centre = math.log(stored_ratio) - move.log_move
    variance = 2 * residual.sigma ** 2 + move.tau2 + move.variance
    if paired is not None and paired[1] > 0:
        together = 1 / (1 / variance + 1 / paired[1])
        centre = together * (centre / variance + paired[0] / paired[1])
        variance = together
    se = math.sqrt(variance)
    q = float(scipy_stats.t.ppf(1 - alpha / 2, min(residual.df, max(1, move.df - 1))))
    high = math.exp(centre + q * se)
    return Cleared(math.exp(centre), math.exp(centre - q * se), high, high < 1 + threshold,
                   move.ratio)
