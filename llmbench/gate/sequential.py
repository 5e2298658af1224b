"""The paired, sequential judgement behind `llmbench ab`: pairs of rounds in, verdicts out.

Each observation is a *pair*: one round of the baseline and one of the candidate, timed
seconds apart in turn, so that the machine's slow drift (the noise that separates runs
minutes apart) falls on both alike. A benchmark is judged on its pairs' log-ratios d =
ln(candidate) - ln(baseline): the ratio is exp of their Hodges-Lehmann centre (the median of
the Walsh averages, (d_i + d_j) / 2), and the test is Wilcoxon's signed-rank test (H0: d
symmetric about 0), exact up to 150 pairs. Under A/A the two sides are exchangeable, so d
*is* symmetric about 0: the test's level then holds exactly, at any number of pairs,
whatever the shape of the noise. Its interval (Walsh averages between the critical ranks) is
distribution-free too. Ranks, not means: one descheduled round (on a busy machine, one round
of a pair can take several times as long as the other; figures:
docs/measurements/2026-11-30-from-the-code.md) widens a t interval past any use, while it
moves a rank by one place.

Sequential, with a budget: pairs are added to one benchmark until it is decided, and it is
looked at only at a fixed schedule of pair counts, the *looks* (`Design.looks`: 8, 12, 18,
... up to `max_pairs`, K looks in all). Looking after every pair and stopping at the first
small p would inflate false alarms; here the design is a group-sequential one with
Bonferroni-split boundaries: every look tests at alpha / K. By the union bound over the K
looks,

* the sequential p-value P_j = min(1, K * min(p_1..p_j)) is valid at whichever look the
  benchmark stops (P(P <= a) <= a under H0, for any stopping rule that stops at looks,
  budget or decisions included);
* the interval at confidence 1 - 2 * alpha / K is a confidence sequence over the looks:
  each of its bounds is wrong at any look with probability <= alpha.

It is conservative (the looks are correlated; Pocock's boundary would be a little lower),
in exchange for a guarantee that needs no numerical integration and no assumption about
when the budget runs out. The verdicts are `compare`'s, on these P and intervals, with Holm
over the benchmarks of the run:

* regression:   Holm-significant, centre > 0, whole interval above 1 + delta;
* improvement:  Holm-significant, centre < 0, whole interval below 1 / (1 + delta);
* unchanged:    whole interval inside [1 / (1 + delta), 1 + delta];
* inconclusive: anything else, with the pairs that should decide it (`pairs_needed`).

Benchmarks run one after another (pytest's order), so a benchmark must be stopped before
the others' p-values exist: it stops as a regression or improvement once P <= alpha / m
(Bonferroni over the m benchmarks, the strictest Holm step), and the final verdicts are then
taken with Holm, which can only confirm such a stop.

Clearing. A confirmation (`llmbench.bench.confirm`) asks a narrower question of M slower
candidates: does any of them regress? A regression is named, so its claim is split over the
family (alpha / M). The pass is one claim about all of them, that *none* is past the
threshold, and it is an intersection-union test: the union of the nulls ("some candidate
is slower than 1 + delta") is rejected only when each candidate's own null is, each at
level alpha, with no split, since P(every candidate cleared | candidate j truly regresses)
<= P(j cleared) <= alpha (Berger 1982). So a candidate is *cleared* once the upper bound of
its interval at the unsplit design (`clears`) lies below 1 + delta: at 8 pairs, when all
eight are, instead of 12 or more pairs at alpha / M. The run passes only if every candidate
is cleared (or proven unchanged or faster); one that is neither stays "not confirmed".
Imports nothing of ours.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special
from scipy import stats as scipy_stats

from llmbench.gate.stats import MAX_ROUNDS_NEEDED, Comparison, Verdict, decide, holm

DEFAULT_MAX_PAIRS = 120
FIRST_LOOK = 8  # the fewest pairs whose signed-rank interval is finite at alpha / K
LOOK_GROWTH = 1.5  # each look ~1.5x the pairs of the one before


@dataclass(frozen=True)
class Design:
    """The fixed plan of looks and the error rate; both sides of a comparison share it."""

    alpha: float = 0.05
    max_pairs: int = DEFAULT_MAX_PAIRS

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"Design: alpha must be in (0, 0.5), got {self.alpha!r}")
        if not (isinstance(self.max_pairs, int) and self.max_pairs >= FIRST_LOOK):
            raise ValueError(f"Design: max_pairs must be an int >= {FIRST_LOOK}, "
                             f"got {self.max_pairs!r}")

    @functools.cached_property
    def looks(self) -> tuple[int, ...]:
        """Pair counts at which a benchmark is judged: 8, 12, 18, 27, 40, 61, 91, ...,
        always ending at max_pairs."""
        out, n = [], float(FIRST_LOOK)
        while round(n) < self.max_pairs:
            out.append(round(n))
            n *= LOOK_GROWTH
        return (*out, self.max_pairs)

    @property
    def look_alpha(self) -> float:
        """Each look's share of alpha (Bonferroni over the K looks)."""
        return self.alpha / len(self.looks)

    def is_look(self, n: int) -> bool:
        return n in self.looks

    def next_look(self, n: int) -> int | None:
        """The first look after n pairs, or None past the last."""
        return next((k for k in self.looks if k > n), None)


def fewest_for_regression(design: Design, family: int) -> int:
    """The first look at which an A/B over candidates of a family of `family`, at their share
    of alpha, can call a regression: n pairs all one way give the signed-rank p = 2 / 2^n,
    which times the looks (the sequential p) must be at most alpha / family. (8 pairs can
    never do it; a family of 17 needs 18.)"""
    return next((look for look in design.looks
                 if len(design.looks) * 2 / 2 ** look <= design.alpha / family),
                design.looks[-1])


EXACT_UP_TO = 150  # pairs; beyond, the signed-rank statistic is taken as normal
_ARE = 3 / math.pi  # efficiency of the signed-rank test against t on normal data


@functools.lru_cache(maxsize=256)
def signed_rank_pmf(n: int) -> np.ndarray:
    """P(W+ = w) for w = 0 .. n(n+1)/2: the exact null distribution of the signed-rank
    statistic of n pairs, each rank's sign a fair coin (counted by dynamic programming)."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0
    for rank in range(1, n + 1):
        counts[rank:] = counts[rank:] + counts[:-rank]  # the right side is the old counts
    return counts / 2.0 ** n


@functools.lru_cache(maxsize=256)
def _signed_rank_cdf(n: int) -> np.ndarray:
    """P(W+ <= w) for w = 0 .. n(n+1)/2."""
    return np.cumsum(signed_rank_pmf(n))


def _lower_cdf(n: int, w: float) -> float:
    """P(W+ <= w) under H0 (symmetry about 0)."""
    if n <= EXACT_UP_TO:
        return float(_signed_rank_cdf(n)[int(math.floor(w + 1e-9))])
    mean, sd = n * (n + 1) / 4, math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    return float(special.ndtr((w + 0.5 - mean) / sd))


def _critical_count(n: int, a: float) -> int:
    """c: how many of the smallest values of W+ have P(W+ <= w) <= a. The interval between
    the c-th smallest and c-th largest Walsh averages then misses the centre on each side
    with probability <= a (none when c == 0: too few pairs for that level)."""
    if n <= EXACT_UP_TO:
        return int(np.searchsorted(_signed_rank_cdf(n), a, side="right"))
    mean, sd = n * (n + 1) / 4, math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    return max(0, int(math.floor(mean + special.ndtri(a) * sd - 0.5)) + 1)


def w_plus(d: np.ndarray) -> float:
    """Wilcoxon's signed-rank statistic: the sum of the ranks of |d| where d > 0 (a zero
    counts half)."""
    n = d.size
    magnitude = np.abs(d)
    if np.unique(magnitude).size == n:
        ranks = np.empty(n)
        ranks[np.argsort(magnitude)] = np.arange(1, n + 1)
    else:  # midranks; ties are rare in timings
        ranks = scipy_stats.rankdata(magnitude)
    return float(ranks[d > 0].sum() + ranks[d == 0].sum() / 2)


def _signed_rank_p(d: np.ndarray) -> float:
    """Two-sided p of Wilcoxon's signed-rank test that d is symmetric about 0."""
    n = d.size
    if not np.abs(d).any():
        return 1.0
    w_plus_d = w_plus(d)
    total = n * (n + 1) / 2
    return min(1.0, 2 * min(_lower_cdf(n, w_plus_d), _lower_cdf(n, total - w_plus_d)))


def walsh_interval(d: np.ndarray, a: float) -> tuple[float, float, float]:
    """(Hodges-Lehmann centre, CI low, CI high) in log units: the median of the Walsh
    averages (d_i + d_j) / 2, i <= j, and the interval between the c-th smallest and c-th
    largest of them, at confidence 1 - 2a."""
    n = d.size
    walsh = np.sort((d[:, None] + d[None, :])[np.triu_indices(n)] / 2)
    centre = float(np.median(walsh))
    c = _critical_count(n, a)
    if c == 0:
        return centre, -math.inf, math.inf
    return centre, float(walsh[c - 1]), float(walsh[walsh.size - c])


@dataclass(frozen=True)
class PairedEstimate:
    """One benchmark's pairs, judged at their last look."""

    n: int  # pairs used: the last look reached (pairs past it wait for the next look)
    centre: float  # Hodges-Lehmann estimate of the log-ratio (median of Walsh averages)
    scale: float  # robust spread of the log-ratios: 1.4826 * their median absolute deviation
    p_value: float  # sequential: K * the smallest two-sided signed-rank p over the looks
    ci_low: float  # ratio bounds at confidence 1 - 2 * alpha / K
    ci_high: float

    @property
    def ratio(self) -> float:
        return math.exp(self.centre)


def log_ratios(baseline: Sequence[float], candidate: Sequence[float]) -> np.ndarray:
    """ln(candidate / baseline) per pair; the i-th round of each side form pair i."""
    b, c = np.asarray(baseline, float), np.asarray(candidate, float)
    n = min(b.size, c.size)
    b, c = b[:n], c[:n]
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(c)) and np.all(b > 0)
            and np.all(c > 0)):
        raise ValueError("paired timings must be finite and > 0 seconds")
    return np.log(c) - np.log(b)


def robust_scale(d: Sequence[float]) -> float:
    """The robust spread of log-ratios `d`: 1.4826 times their median absolute deviation (the
    standard deviation, for normal noise, that one outlying pair does not move)."""
    d = np.asarray(d, float)
    return 1.4826 * float(np.median(np.abs(d - np.median(d))))


def estimate(d: Sequence[float], design: Design) -> PairedEstimate | None:
    """The judgement of log-ratios `d` at the last look they reach; None before the first."""
    d = np.asarray(d, float)
    reached = [k for k in design.looks if k <= d.size]
    if not reached:
        return None
    # The sequential p is the smallest p of every look made so far; the interval is the
    # last look's.
    smallest_p = min(_signed_rank_p(d[:k]) for k in reached)
    last = d[:reached[-1]]
    centre, low, high = walsh_interval(last, design.look_alpha)
    scale = robust_scale(last)
    return PairedEstimate(n=reached[-1], centre=centre, scale=scale,
                          p_value=min(1.0, len(design.looks) * smallest_p),
                          ci_low=math.exp(low), ci_high=math.exp(high))


def verdict(est: PairedEstimate, threshold: float, p_adjusted: float, alpha: float) -> Verdict:
    """The gate's one rule (`stats.decide`) on a paired estimate and its Holm-adjusted P."""
    return decide(p_adjusted <= alpha, est.centre, est.ci_low, est.ci_high, threshold)


def stop_decision(d: Sequence[float], design: Design, threshold: float, m: int
                  ) -> Verdict | None:
    """Whether a benchmark can stop now, and as what: called after each pair. Decides only
    at a look; a regression or improvement needs P <= alpha / m (see the module docstring)."""
    d = np.asarray(d, float)
    if not design.is_look(d.size):
        return None
    est = estimate(d, design)
    found = verdict(est, threshold, min(1.0, m * est.p_value), design.alpha)
    return None if found is Verdict.INCONCLUSIVE else found


def clears(d: Sequence[float], clearing: Design, threshold: float) -> PairedEstimate | None:
    """The estimate of log-ratios `d` at the clearing level when its interval's upper bound
    lies below 1 + threshold (the pairs rule out a regression); None otherwise, or before
    the first look. `clearing` is a confirmation's unsplit design (module docstring)."""
    est = estimate(d, clearing)
    return est if est is not None and est.ci_high < 1 + threshold else None


def pairs_needed(est: PairedEstimate, design: Design, threshold: float) -> int:
    """The pairs at which, at the spread seen so far, the interval should clear the nearest
    decision boundary (ln(1 + delta) either side): the large-sample width of the
    signed-rank interval, z * scale / sqrt(n * 3/pi). MAX_ROUNDS_NEEDED when it sits on it."""
    gap = abs(abs(est.centre) - math.log1p(threshold))
    if est.scale == 0:
        return design.next_look(est.n) or est.n + 1
    if gap == 0:
        return MAX_ROUNDS_NEEDED
    z = float(special.ndtri(1 - design.look_alpha))
    n = math.ceil((z * est.scale / gap) ** 2 / _ARE)
    return min(MAX_ROUNDS_NEEDED, max(est.n + 1, n))


def power(effect: float, sd: float, n: int, threshold: float, design: Design) -> float:
    """Closed form (large-sample): the chance that the look at n pairs alone calls a true
    ratio `effect` (> 1 + threshold) a regression by its interval's lower bound, for normal
    log-ratios of standard deviation `sd`. The signed-rank interval is as wide as a t
    interval on n * 3/pi pairs. The sequential design's power is at least this: it can also
    stop at an earlier look."""
    shift = (math.log(effect) - math.log1p(threshold)) * math.sqrt(n * _ARE) / sd
    return float(special.ndtr(shift - special.ndtri(1 - design.look_alpha)))


def judge_family(pairs: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                 thresholds: Mapping[str, float], design: Design,
                 groups: Mapping[str, str] | None = None,
                 clearing: Design | None = None) -> tuple[Comparison, ...]:
    """One `Comparison` per benchmark of paired samples (baseline, candidate in pair order),
    with Holm over the run. A benchmark with fewer pairs than the first look is inconclusive.
    `clearing` (a confirmation's unsplit design): an inconclusive benchmark whose interval
    at that level lies below 1 + threshold carries that interval, and its reason says it is
    cleared (see the module docstring, Clearing)."""
    groups = groups or {}
    names = list(pairs)
    estimates = {k: estimate(log_ratios(*pairs[k]), design) for k in names}
    p = [1.0 if estimates[k] is None else estimates[k].p_value for k in names]
    adjusted = dict(zip(names, holm(p) if names else [], strict=True))
    out = []
    for name in names:
        b, c = (np.asarray(x, float) for x in pairs[name])
        n_pairs = min(b.size, c.size)
        delta, est = thresholds[name], estimates[name]
        if est is None:
            found, needed = Verdict.INCONCLUSIVE, design.looks[0]
            ratio, lo, hi, pv = (float(np.exp(np.mean(log_ratios(b, c)))) if n_pairs else
                                 math.nan), 0.0, math.inf, 1.0
            reason = (f"{n_pairs} pairs, fewer than the first look ({design.looks[0]})"
                      if n_pairs else "no timed pair: the budget was spent before its turn")
        else:
            found = verdict(est, delta, adjusted[name], design.alpha)
            ratio, lo, hi, pv = est.ratio, est.ci_low, est.ci_high, est.p_value
            needed = pairs_needed(est, design, delta) if found is Verdict.INCONCLUSIVE else None
            cleared = (clears(log_ratios(b, c), clearing, delta)
                       if clearing is not None and found is Verdict.INCONCLUSIVE else None)
            if cleared is not None:
                lo, hi, needed = cleared.ci_low, cleared.ci_high, None
            ci = f"CI [{lo:.3f}, {hi:.3f}]"
            reason = {
                Verdict.REGRESSION: f"slower beyond +{delta:.0%}: P_adj={adjusted[name]:.2g}, {ci}",
                Verdict.IMPROVEMENT: f"faster beyond {delta:.0%}: P_adj={adjusted[name]:.2g}, {ci}",
                Verdict.UNCHANGED: f"{ci} within +/-{delta:.0%}",
                Verdict.INCONCLUSIVE: f"P_adj={adjusted[name]:.2g}, {ci} not decided against "
                                      f"+/-{delta:.0%}; ~{needed} pairs should decide",
            }[found] if cleared is None else (
                f"cleared: {ci} below +{delta:.0%} at the clearing level (alpha "
                f"{clearing.alpha:.2g}, not split over the candidates)")
            reason += f" ({est.n} pairs at the last look)"
        out.append(Comparison(
            name=name, group=groups.get(name), n_baseline=int(b.size), n_candidate=int(c.size),
            baseline_median=float(np.median(b)) if b.size else math.nan,
            candidate_median=float(np.median(c)) if c.size else math.nan,
            ratio=ratio, ci_low=lo, ci_high=hi, p_value=pv, p_adjusted=float(adjusted[name]),
            threshold=delta, verdict=found, rounds_needed=needed, reason=reason,
            n_pairs=n_pairs))
    return tuple(out)
