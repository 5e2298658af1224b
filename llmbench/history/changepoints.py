"""Change points in a benchmark's history, and the newest run's verdict against its level.

Everything works on the log of each run's median, so a shift is a ratio whatever the
benchmark's scale, and the run is the unit: separate runs of the same code spread far
more on a shared machine than rounds inside one run do (figures:
docs/measurements/2026-11-29-stored-and-block-ab.md), so testing rounds would claim shifts
that are only runs.

1. Candidates come from ruptures' PELT with a least-squares cost (shifts in the mean of
   the log medians), each segment at least `MIN_SEGMENT` runs, at a BIC-like penalty of
   `PENALTY * sigma² * ln(n)`. sigma is the run-to-run noise, estimated from the MAD of
   neighbouring differences (divided by √2), which a few shifts barely move.
2. Each candidate is then tested by permutation, the scan test E-Divisive uses: the runs of
   the two segments beside it are shuffled many times, and its split must stand out more
   than the best split of the shuffled runs does (the statistic is the standardized
   difference of the two sides' means, maximized over every split). That accounts for the
   candidate being the best of many split points, without assuming normal noise. The p is
   multiplied by the number of benchmarks, so that `alpha` is the false-alarm rate of the
   whole history. A change point must also move the level by more than the practical
   threshold, as a regression in `compare` must. The least significant candidate (or one
   too small) is dropped, its neighbours merge, and the rest are tested again, until every
   one left passes.
3. The newest run is judged against the runs of its own level (since the last change
   point, newest excluded): a prediction interval for one more run, mean ± t · s · √(1 + 1/k)
   at 1 − alpha / m. A regression lies above it *and* beyond the practical threshold, as in
   `compare`; at least `MIN_SEGMENT` runs of that level are needed.

Why ruptures rather than Apache Otava (E-Divisive means with a t-test, the method MongoDB
and DataStax use): Otava pins numpy 2.2 and brings BigQuery, Postgres and Slack clients;
ruptures needs numpy and scipy only. Step 2 gives PELT's candidates a significance, as
E-Divisive's permutation test does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from llmbench.gate.stats import Verdict

MIN_SEGMENT = 3  # runs on each side of a change point
PENALTY = 3.0  # times sigma² ln(n): a little above BIC's 2, as the t-test filters after


@dataclass(frozen=True)
class Shift:
    """A change point: the series' level moved at `index` (the first run of the new level)."""

    index: int
    ratio: float  # median of the level after / median of the level before
    p: float  # adjusted for the scan and the benchmarks (see the module docstring)


# The history's words for the gate's verdicts: a newest run within its level's prediction
# interval is "consistent" with it (not "unchanged": no threshold bounds the interval).
WORDS = {Verdict.REGRESSION: "regression", Verdict.IMPROVEMENT: "improvement",
         Verdict.UNCHANGED: "consistent"}


@dataclass(frozen=True)
class NewestVerdict:
    # The gate's verdicts (`gate.stats.Verdict`): regression, improvement, unchanged (within
    # its level), or inconclusive, with `why` ("too few runs", "not in the newest run").
    verdict: Verdict
    level_runs: int  # runs of the newest run's level before it
    ratio: float | None = None  # newest / the level's mean (geometric)
    low: float | None = None  # the prediction interval, as ratios to the level's mean
    high: float | None = None
    why: str | None = None

    @property
    def word(self) -> str:
        """The verdict as history says it: "consistent" for unchanged, the why for
        inconclusive."""
        return WORDS.get(self.verdict) or self.why or self.verdict.value

    def to_json(self) -> dict:
        return {"verdict": self.word, "level_runs": self.level_runs, "ratio": self.ratio,
                "low": self.low, "high": self.high}


def noise_sigma(x: np.ndarray) -> float:
    """Run-to-run noise of a log series, robust to a few shifts: MAD of neighbouring
    differences, scaled to a normal sd, over √2 (a difference holds two runs' noise)."""
    if x.size < 3:
        return float(np.std(x))
    d = np.diff(x)
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2))


def _candidates(x: np.ndarray, min_segment: int) -> list[int]:
    import ruptures  # a second to import: only when a history is judged

    sigma = noise_sigma(x)
    if sigma == 0.0:
        sigma = float(np.std(x))
    if sigma == 0.0:
        return []  # a constant series has no shift
    algo = ruptures.Pelt(model="l2", min_size=min_segment, jump=1).fit(x.reshape(-1, 1))
    ends = algo.predict(pen=PENALTY * sigma**2 * math.log(x.size))
    return [e for e in ends if e < x.size]


def _best_split(segments: np.ndarray, min_segment: int) -> np.ndarray:
    """For each row, the largest standardized difference of means over every split point."""
    length = segments.shape[-1]
    cuts = np.arange(min_segment, length - min_segment + 1)
    sums = np.cumsum(segments, axis=-1)
    left = sums[..., cuts - 1] / cuts
    right = (sums[..., -1:] - sums[..., cuts - 1]) / (length - cuts)
    return np.max(np.abs(left - right) / np.sqrt(1 / cuts + 1 / (length - cuts)), axis=-1)


def scan_p(segment: np.ndarray, min_segment: int, permutations: int, seed: int = 0) -> float:
    """How often shuffled runs split at least as well as `segment` does (permutation p)."""
    observed = _best_split(segment, min_segment)
    if not np.isfinite(observed) or np.ptp(segment) == 0:
        return 1.0
    rng = np.random.default_rng(seed)
    shuffled = rng.permuted(np.broadcast_to(segment, (permutations, segment.size)), axis=-1)
    # A shuffle as good as the real order counts against it (ties included: 1e-12).
    beaten = int(np.sum(_best_split(shuffled, min_segment) >= observed - 1e-12))
    return (1 + beaten) / (1 + permutations)


def find_shifts(x: np.ndarray, *, alpha: float, benchmarks: int = 1, threshold: float = 0.0,
                min_segment: int = MIN_SEGMENT) -> list[Shift]:
    """The change points of log series `x` that pass the permutation test and move the
    level by more than `threshold` (a ratio beyond 1 + threshold or 1 / (1 + threshold),
    the practical threshold `compare` uses); see above."""
    x = np.asarray(x, dtype=float)
    n = x.size
    if n < 2 * min_segment:
        return []
    # Enough shuffles that the smallest p they can give passes alpha over the benchmarks.
    permutations = int(min(50_000, max(999, 20 * benchmarks / alpha)))
    kept = _candidates(x, min_segment)
    while kept:
        bounds = [0, *kept, n]
        tested = []
        for i, cut in enumerate(kept, start=1):
            before, after = x[bounds[i - 1]:cut], x[cut:bounds[i + 1]]
            p = scan_p(x[bounds[i - 1]:bounds[i + 1]], min_segment, permutations)
            tested.append(Shift(cut, math.exp(np.median(after) - np.median(before)),
                                min(1.0, p * benchmarks)))
        # Too small a step counts as failing: 1 + its p ranks it below every significant one.
        small = math.log1p(threshold)
        worst = max(tested, key=lambda s: s.p + (abs(math.log(s.ratio)) <= small))
        if worst.p <= alpha and abs(math.log(worst.ratio)) > small:
            return tested
        kept.remove(worst.index)
    return []


def judge_newest(x: np.ndarray, shifts: list[Shift], *, threshold: float, alpha: float,
                 benchmarks: int = 1, min_level: int = MIN_SEGMENT) -> NewestVerdict:
    """The newest point of `x` against its level's prediction interval; see above."""
    x = np.asarray(x, dtype=float)
    start = shifts[-1].index if shifts else 0
    level, newest = x[start:-1], x[-1]
    k = level.size
    if k < min_level:
        return NewestVerdict(Verdict.INCONCLUSIVE, k, why="too few runs")
    mean, sd = float(np.mean(level)), float(np.std(level, ddof=1))
    half = stats.t.ppf(1 - alpha / (2 * benchmarks), k - 1) * sd * math.sqrt(1 + 1 / k)
    ratio = math.exp(newest - mean)
    low, high = math.exp(-half), math.exp(half)
    if ratio > high and ratio > 1 + threshold:
        verdict = Verdict.REGRESSION
    elif ratio < low and ratio < 1 / (1 + threshold):
        verdict = Verdict.IMPROVEMENT
    else:
        verdict = Verdict.UNCHANGED
    return NewestVerdict(verdict, k, ratio, low, high)
