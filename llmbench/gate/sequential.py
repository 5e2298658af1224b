"""The paired, sequential judgement behind `llmbench ab`: pairs of rounds in, verdicts out.

Each observation is a *pair*: one round of the baseline and one of the candidate, timed
seconds apart in turn, so that the machine's slow drift (the noise that separates runs
minutes apart) falls on both alike. A benchmark is judged on its pairs' log-ratios
d = ln(candidate) - ln(baseline): the ratio is exp(mean d), the geometric mean of the pair
ratios, and the test is Student's t on d (H0: mean 0). Under A/A the two sides are
exchangeable, so d is symmetric about 0, where the t test holds up well even with the heavy
tails that timings have.

Sequential, with a budget: pairs are added to one benchmark until it is decided, and it is
looked at only at a fixed schedule of pair counts, the *looks* (`Design.looks`: 8, 12, 18,
... up to `max_pairs`, K looks in all). Looking after every pair and stopping at the first
small p would inflate false alarms; here the design is a group-sequential one with
Bonferroni-split boundaries: every look tests at alpha / K. By the union bound over the K
looks,

* the sequential p-value P_j = min(1, K * min(p_1..p_j)) is valid at whichever look the
  benchmark stops (P(P <= a) <= a under H0, for any stopping rule that stops at looks,
  budget or decisions included);
* the t interval at confidence 1 - 2 * alpha / K is a confidence sequence over the looks:
  each of its bounds is wrong at any look with probability <= alpha.

It is conservative (the looks are correlated; Pocock's boundary would be a little lower),
in exchange for a guarantee that needs no numerical integration and no assumption about
when the budget runs out. The verdicts are `compare`'s, on these P and intervals, with Holm
over the benchmarks of the run:

* regression:   Holm-significant, mean d > 0, whole interval above 1 + delta;
* improvement:  Holm-significant, mean d < 0, whole interval below 1 / (1 + delta);
* unchanged:    whole interval inside [1 / (1 + delta), 1 + delta];
* inconclusive: anything else, with the pairs that should decide it (`pairs_needed`).

Benchmarks run one after another (pytest's order), so a benchmark must be stopped before
the others' p-values exist: it stops as a regression or improvement once P <= alpha / m
(Bonferroni over the m benchmarks, the strictest Holm step), and the final verdicts are then
taken with Holm, which can only confirm such a stop. Imports nothing of ours.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special
from scipy import stats as scipy_stats

from llmbench.gate.stats import MAX_ROUNDS_NEEDED, Comparison, Verdict, holm

DEFAULT_MAX_PAIRS = 120
FIRST_LOOK = 8  # fewer pairs say little about the spread that the t interval rests on
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
        """Pair counts at which a benchmark is judged: 8, 12, 18, 27, 40, 60, 90, ...,
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


@functools.lru_cache(maxsize=4096)
def _t_quantile(q: float, dof: int) -> float:
    return float(scipy_stats.t.ppf(q, dof))


@dataclass(frozen=True)
class PairedEstimate:
    """One benchmark's pairs, judged at their last look."""

    n: int  # pairs used: the last look reached (pairs past it wait for the next look)
    mean: float  # mean log-ratio
    sd: float  # standard deviation of the log-ratios
    p_value: float  # sequential: K * the smallest two-sided t p-value over the looks so far
    ci_low: float  # ratio bounds at confidence 1 - 2 * alpha / K
    ci_high: float

    @property
    def ratio(self) -> float:
        return math.exp(self.mean)


def log_ratios(baseline: Sequence[float], candidate: Sequence[float]) -> np.ndarray:
    """ln(candidate / baseline) per pair; the i-th round of each side form pair i."""
    b, c = np.asarray(baseline, float), np.asarray(candidate, float)
    n = min(b.size, c.size)
    b, c = b[:n], c[:n]
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(c)) and np.all(b > 0)
            and np.all(c > 0)):
        raise ValueError("paired timings must be finite and > 0 seconds")
    return np.log(c) - np.log(b)


def _t_test(d: np.ndarray, design: Design) -> tuple[float, float, float, float]:
    """(mean, sd, two-sided p, CI half-width in log units) of the pairs d at one look."""
    n, mean = d.size, float(d.mean())
    sd = float(d.std(ddof=1))
    if sd == 0:  # synthetic data with no spread: the limit of the t test
        return mean, 0.0, (1.0 if mean == 0 else 0.0), 0.0
    t = mean / (sd / math.sqrt(n))
    p = float(2 * special.stdtr(n - 1, -abs(t)))  # t.sf's value, without its overhead
    half = _t_quantile(1 - design.look_alpha, n - 1) * sd / math.sqrt(n)
    return mean, sd, p, half


def estimate(d: Sequence[float], design: Design) -> PairedEstimate | None:
    """The judgement of log-ratios `d` at the last look they reach; None before the first."""
    d = np.asarray(d, float)
    reached = [k for k in design.looks if k <= d.size]
    if not reached:
        return None
    smallest_p = 1.0
    for k in reached:  # the sequential p is the smallest p of every look made so far
        mean, sd, p, half = _t_test(d[:k], design)
        smallest_p = min(smallest_p, p)
    return PairedEstimate(n=reached[-1], mean=mean, sd=sd,
                          p_value=min(1.0, len(design.looks) * smallest_p),
                          ci_low=math.exp(mean - half), ci_high=math.exp(mean + half))


def verdict(est: PairedEstimate, threshold: float, p_adjusted: float, alpha: float) -> Verdict:
    """The verdict words of `compare`, on a paired estimate and its Holm-adjusted P."""
    upper, lower = 1 + threshold, 1 / (1 + threshold)
    significant = p_adjusted <= alpha
    if significant and est.mean > 0 and est.ci_low > upper:
        return Verdict.REGRESSION
    if significant and est.mean < 0 and est.ci_high < lower:
        return Verdict.IMPROVEMENT
    if lower <= est.ci_low and est.ci_high <= upper:
        return Verdict.UNCHANGED
    return Verdict.INCONCLUSIVE


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


def pairs_needed(est: PairedEstimate, design: Design, threshold: float) -> int:
    """The look at which, at the spread seen so far, the interval should clear the nearest
    decision boundary (ln(1 + delta) either side); MAX_ROUNDS_NEEDED when it sits on it."""
    gap = abs(abs(est.mean) - math.log1p(threshold))
    if est.sd == 0:
        return design.next_look(est.n) or est.n + 1
    if gap == 0:
        return MAX_ROUNDS_NEEDED
    q = 1 - design.look_alpha
    n = max(est.n + 1, math.ceil((scipy_stats.norm.ppf(q) * est.sd / gap) ** 2))
    while n < MAX_ROUNDS_NEEDED and _t_quantile(q, n - 1) * est.sd / math.sqrt(n) >= gap:
        n += 1
    return min(MAX_ROUNDS_NEEDED, n)


def power(effect: float, sd: float, n: int, threshold: float, design: Design) -> float:
    """Closed form: the chance that the look at n pairs alone calls a true ratio `effect`
    (> 1 + threshold) a regression, by its interval's lower bound (non-central t). The
    sequential design's power is at least this: it can also stop at an earlier look."""
    shift = (math.log(effect) - math.log1p(threshold)) * math.sqrt(n) / sd
    return float(scipy_stats.nct.sf(_t_quantile(1 - design.look_alpha, n - 1), n - 1, shift))


def judge_family(pairs: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                 thresholds: Mapping[str, float], design: Design,
                 groups: Mapping[str, str] | None = None) -> tuple[Comparison, ...]:
    """One `Comparison` per benchmark of paired samples (baseline, candidate in pair order),
    with Holm over the run. A benchmark with fewer pairs than the first look is inconclusive."""
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
            reason = f"{n_pairs} pairs, fewer than the first look ({design.looks[0]})"
        else:
            found = verdict(est, delta, adjusted[name], design.alpha)
            ratio, lo, hi, pv = est.ratio, est.ci_low, est.ci_high, est.p_value
            needed = pairs_needed(est, design, delta) if found is Verdict.INCONCLUSIVE else None
            ci = f"CI [{lo:.3f}, {hi:.3f}]"
            reason = {
                Verdict.REGRESSION: f"slower beyond +{delta:.0%}: P_adj={adjusted[name]:.2g}, {ci}",
                Verdict.IMPROVEMENT: f"faster beyond {delta:.0%}: P_adj={adjusted[name]:.2g}, {ci}",
                Verdict.UNCHANGED: f"{ci} within +/-{delta:.0%}",
                Verdict.INCONCLUSIVE: f"P_adj={adjusted[name]:.2g}, {ci} not decided against "
                                      f"+/-{delta:.0%}; ~{needed} pairs should decide",
            }[found] + f" ({est.n} pairs at the last look)"
        out.append(Comparison(
            name=name, group=groups.get(name), n_baseline=int(b.size), n_candidate=int(c.size),
            baseline_median=float(np.median(b)) if b.size else math.nan,
            candidate_median=float(np.median(c)) if c.size else math.nan,
            ratio=ratio, ci_low=lo, ci_high=hi, p_value=pv, p_adjusted=float(adjusted[name]),
            threshold=delta, verdict=found, rounds_needed=needed, reason=reason,
            n_pairs=n_pairs))
    return tuple(out)
