"""Statistics behind the regression gate: timing samples in, immutable verdicts out.

One module, on purpose: it is one decision rule (the rank test, the bootstrap
interval and the rounds-needed planner all answer to the same `Rule` and are read together
against the verdict definitions below), and it imports nothing of ours,
so the rule can be checked on its own.

Pure functions, no I/O; samples are per-round seconds, lower is better. API: ``compare_family``
(one run -> ``Comparison`` per benchmark, Holm across the run), ``speed_ratio`` (control workload
-> ``SpeedRatio``), ``holm``, ``threshold_for`` (+ ``ThresholdOverrides``), ``summarize``,
``Rule``, ``Verdict``. With delta the threshold and ratio = median(candidate) / median(baseline):

* regression:   Holm-significant, ranks say "slower", whole CI above 1 + delta;
* improvement:  Holm-significant, ranks say "faster", whole CI below 1 / (1 + delta): symmetric in
  log-ratio (unlike 1 - delta), so swapping the sides swaps regression and improvement;
* unchanged:    whole CI inside [1 / (1 + delta), 1 + delta] (a significant but small change is
  within tolerance), given enough rounds that the test could have fired at all;
* inconclusive: anything else, with ``rounds_needed`` per side to decide. Never a silent pass.

Why:
- Test: two-sided Mann-Whitney U, exact without ties. False alarms come from "same code, same
  machine", where the samples are exchangeable: the exact rank test is then valid at any n and
  any shape (timings are skewed, heavy-tailed). Brunner-Munzel allows unequal spreads but is
  asymptotic and degenerate (p = 0, divide-by-zero) on complete separation, i.e. on a real
  regression at 10 rounds, and would let 3 vs 3 rounds "prove" one.
- Directions: one two-sided hypothesis per benchmark (m = benchmarks in the run), direction read
  off the rank statistic. Holm with directional decisions keeps P(any regression or improvement
  claim in an A/A run) <= alpha (Holm 1979; Shaffer 1980 for directional errors, independent
  tests). 2m one-sided hypotheses would be valid but needlessly conservative: both halves of a
  pair can never be small.
- CI: percentile bootstrap of the ratio of medians at ``confidence = 1 - 2 * alpha``: each claim
  against delta is one-sided, so each bound is a level-alpha test and "unchanged" is Schuirmann's
  TOST. Holm carries the familywise guarantee; the CI (not multiplicity-adjusted) is the
  practical-relevance filter.
- Machine speed: ``compare_family(speed_ratio=r)`` divides candidate samples by r (r > 1: the
  candidate machine is slower), i.e. into baseline-machine time. r's uncertainty is not
  propagated: normalize only when the control CI excludes 1, with delta well above its width.
- Rounds are assumed independent; drift within a run (thermal, clocks) is not modelled.
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
import types
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
from scipy import stats as scipy_stats

DEFAULT_THRESHOLDS = types.MappingProxyType({"cpu": 0.10, "cuda": 0.05, "mps": 0.05})
MAX_ROUNDS_NEEDED = 10_000  # cap for rounds_needed when the estimate sits on the threshold
_EXACT_TIES_LIMIT = 20_000  # enumerate tie-aware splits up to this many (enumeration stays cheap)
_MEDIAN_SE = math.sqrt(math.pi / 2)  # SE(median) / (sigma / sqrt(n)) for normal (log) data


class Verdict(str, Enum):
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    UNCHANGED = "unchanged"
    INCONCLUSIVE = "inconclusive"
    # Never given here: a stored comparison's slowdown that nothing proved, neither the
    # noise between runs nor a paired A/B (one that could not run, was left out by the
    # budget, or did not decide it) (`gate.stored`).
    NOT_CONFIRMED = "not confirmed"
    # Never given here either: a benchmark whose intervals rule out a regression (below
    # 1 + delta: the paired A/B's, or the stored rounds' and the one against the noise
    # between runs) without showing it within the threshold both ways: not slower, perhaps
    # faster. The gate's question has its answer (`gate.stored`).
    NOT_SLOWER = "not slower"

    def __str__(self) -> str:
        return self.value


def _check_threshold(value: float, what: str) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not (ok and math.isfinite(value) and value > 0):
        raise ValueError(f"{what}: threshold must be a finite number > 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Rule:
    threshold: float = 0.10
    alpha: float = 0.05
    confidence: float | None = None  # None -> 1 - 2 * alpha (see module docstring)
    n_resamples: int = 2000
    seed: int = 0

    def __post_init__(self) -> None:
        _check_threshold(self.threshold, "Rule")
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"Rule: alpha must be in (0, 0.5), got {self.alpha!r}")
        if self.confidence is None:
            object.__setattr__(self, "confidence", 1 - 2 * self.alpha)
        elif not 0 < self.confidence < 1:
            raise ValueError(f"Rule: confidence must be in (0, 1), got {self.confidence!r}")
        if not (isinstance(self.n_resamples, numbers.Integral) and self.n_resamples >= 100):
            raise ValueError(f"Rule: n_resamples must be an int >= 100, got {self.n_resamples!r}")
        if not (isinstance(self.seed, numbers.Integral) and self.seed >= 0):
            raise ValueError(f"Rule: seed must be an int >= 0, got {self.seed!r}")


@dataclass(frozen=True)
class Comparison:
    name: str
    group: str | None
    n_baseline: int
    n_candidate: int
    baseline_median: float
    candidate_median: float  # after speed normalization
    ratio: float  # candidate_median / baseline_median
    ci_low: float  # (0, inf) when a side has a single round: no dispersion to resample
    ci_high: float
    p_value: float  # two-sided rank test
    p_adjusted: float  # Holm over the run
    threshold: float
    verdict: Verdict
    rounds_needed: int | None  # only for INCONCLUSIVE: `unit`s per side that should decide
    reason: str
    speed_ratio: float = 1.0
    n_pairs: int = 0  # pairs of rounds, when judged paired (`sequential`)

    @property
    def rules_out_slower(self) -> bool:
        """Whether its interval lies below 1 + threshold: slower beyond the threshold is
        ruled out, whatever else is undecided (unchanged or faster)."""
        return self.ci_high < 1 + self.threshold

    @property
    def unit(self) -> str:
        """What `rounds_needed` counts: "pairs" when judged paired, else "rounds" (per
        side)."""
        return "pairs" if self.n_pairs else "rounds"

    @property
    def per_side(self) -> str:
        """How `rounds_needed` reads: "/side" for rounds; a pair spans both."""
        return "" if self.n_pairs else "/side"


@dataclass(frozen=True)
class SpeedRatio:
    ratio: float  # median(candidate control) / median(baseline control); > 1: machine slower
    ci_low: float
    ci_high: float
    n_baseline: int
    n_candidate: int


@dataclass(frozen=True)
class ThresholdOverrides:
    benchmarks: Mapping[str, float] = field(default_factory=dict)
    groups: Mapping[str, float] = field(default_factory=dict)
    run: float | None = None

    def __post_init__(self) -> None:
        run = [] if self.run is None else [("whole run", self.run)]
        for key, value in [*self.benchmarks.items(), *self.groups.items(), *run]:
            _check_threshold(value, f"override {key!r}")


def threshold_for(
    name: str, group: str | None, device: str, overrides: ThresholdOverrides | None = None
) -> float:
    """Delta for one benchmark: benchmark override > group > whole run > device default."""
    o = overrides or ThresholdOverrides()
    if name in o.benchmarks:
        return float(o.benchmarks[name])
    if group is not None and group in o.groups:
        return float(o.groups[group])
    if o.run is not None:
        return float(o.run)
    kind = device.split(":")[0].strip().lower()  # "cuda:1" -> "cuda"
    if kind not in DEFAULT_THRESHOLDS:
        raise ValueError(f"no default threshold for device {device!r}; known: "
                         f"{sorted(DEFAULT_THRESHOLDS)} (or pass an override)")
    return DEFAULT_THRESHOLDS[kind]


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm step-down adjusted p-values, in input order (reject where adjusted <= alpha)."""
    p = np.asarray(p_values, dtype=float)
    if p.ndim != 1 or not np.all((p >= 0) & (p <= 1)):  # NaN fails the comparison too
        raise ValueError("holm: need a 1-D sequence of p-values in [0, 1]")
    m = p.size
    order = np.argsort(p, kind="stable")
    # i-th smallest is scaled by (m - i); the running max enforces the step-down monotonicity.
    stepped = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = stepped
    return out


def _samples(x: Sequence[float], what: str) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if a.ndim != 1:
        raise ValueError(f"{what}: expected a 1-D sequence of timings, got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{what}: no samples (empty timing array)")
    if not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise ValueError(f"{what}: timings must be finite and > 0 seconds")
    return a


def _min_p(n1: int, n2: int) -> float:
    """Smallest two-sided p the exact rank test can produce: total separation, 2 / C(n1+n2, n1)."""
    return min(1.0, 2.0 / math.comb(n1 + n2, n1))


def _rounds_for_test(m: int, alpha: float) -> int:
    """Fewest equal rounds per side whose best exact p passes Holm's strictest step alpha / m."""
    return next(n for n in itertools.count(1) if _min_p(n, n) <= alpha / m)


@functools.lru_cache(maxsize=4096)
def _exact_p(n_b: int, n_c: int, u: int) -> float:
    """scipy's exact two-sided Mann-Whitney p. Without ties it depends only on (n_b, n_c, U), so
    it is memoized (scipy's per-call overhead dwarfs the work) on data rebuilt to have this U."""
    below = np.clip(u - n_b * np.arange(n_c), 0, n_b)  # how many b's lie below each c; sum = u
    c = below + 0.5 * np.arange(1, n_c + 1) / (n_c + 1)  # distinct, just above `below` b's
    b = np.arange(1, n_b + 1)
    return float(scipy_stats.mannwhitneyu(c, b, alternative="two-sided", method="exact").pvalue)


def _tied_exact_p(ranks: np.ndarray, n_c: int) -> float:
    """Exact two-sided p of the rank sum of the first n_c midranks, conditional on the ties."""
    splits = np.array(list(itertools.combinations(range(ranks.size), n_c)))
    sums, observed = ranks[splits].sum(axis=1), ranks[:n_c].sum()
    eps = 1e-9 * ranks.size  # midranks are multiples of 1/2: guard float sums
    return min(1.0, 2 * min(np.mean(sums <= observed + eps), np.mean(sums >= observed - eps)))


def _rank_test(b: np.ndarray, c: np.ndarray) -> tuple[float, int]:
    """Two-sided Mann-Whitney p and direction (+1: candidate ranks slower, -1 faster, 0 tie)."""
    if np.all(b == b[0]) and np.all(c == b[0]):
        return 1.0, 0  # zero variance, identical: nothing to test (scipy would 0/0)
    sorted_b = np.sort(b)  # U_c = #(b < c) + #(b == c) / 2, over all pairs
    u_c = (np.searchsorted(sorted_b, c, "left") + np.searchsorted(sorted_b, c, "right")).sum() / 2
    direction = int(np.sign(u_c - b.size * c.size / 2))
    if np.unique(np.concatenate([b, c])).size == b.size + c.size:
        p = _exact_p(b.size, c.size, round(u_c))
    elif math.comb(b.size + c.size, c.size) <= _EXACT_TIES_LIMIT:
        # Ties: the normal approximation is anti-conservative at such sizes (3 vs 3, each side
        # constant: 0.047 against the exact 0.1), so enumerate the conditional distribution.
        p = _tied_exact_p(scipy_stats.rankdata(np.concatenate([c, b])), c.size)
    else:  # tie-corrected normal approximation, fine at >= 9 rounds per side
        p = scipy_stats.mannwhitneyu(c, b, alternative="two-sided", method="asymptotic").pvalue
    # Never claim more than an exact test could (ties only make the distribution coarser).
    return max(float(p), _min_p(b.size, c.size)), direction


def _boot_medians(x: np.ndarray, rng: np.random.Generator, n_resamples: int) -> np.ndarray:
    """Medians of n_resamples resamples of x (sorting rows: cheaper than np.median here)."""
    n, step = x.size, max(1, 2**20 // x.size)  # chunks: memory stays ~8 MB at any round count
    out = []
    for i in range(0, n_resamples, step):
        s = np.sort(x[rng.integers(0, n, (min(step, n_resamples - i), n))], axis=1)
        out.append((s[:, (n - 1) // 2] + s[:, n // 2]) / 2)
    return np.concatenate(out)


def _ratio_ci(b: np.ndarray, c: np.ndarray, rule: Rule, seed) -> tuple[float, float]:
    """Percentile bootstrap of median(c) / median(b), as scipy.stats.bootstrap(method="percentile")
    (tests compare) but without its per-call overhead, which dominates at a few rounds. Not BCa:
    its jackknife is erratic for medians of ~10 points and NaN on zero-variance data."""
    if b.size < 2 or c.size < 2:
        return 0.0, math.inf  # one round: no dispersion to resample, say "anything"
    rng = np.random.default_rng(seed)
    ratios = _boot_medians(c, rng, rule.n_resamples) / _boot_medians(b, rng, rule.n_resamples)
    tail = (1 - rule.confidence) / 2
    lo, hi = np.quantile(ratios, [tail, 1 - tail])
    return float(lo), float(hi)


def _pooled_sd(x: np.ndarray, y: np.ndarray) -> float:
    """Pooled standard deviation of two samples (needs 3 or more values in all)."""
    dof = x.size + y.size - 2
    return math.sqrt((np.sum((x - x.mean()) ** 2) + np.sum((y - y.mean()) ** 2)) / dof)


def _rounds_needed(b, c, ratio, delta, rule, m, n_now) -> tuple[int, str]:
    n_test = _rounds_for_test(m, rule.alpha)
    dof = b.size + c.size - 2
    if dof == 0:
        return max(n_test, n_now + 1), "dispersion unknown from 1 round per side"
    sigma = _pooled_sd(np.log(b), np.log(c))
    # CI half-width of log ratio at n rounds/side ~ z * 1.2533 * sigma * sqrt(2/n); it must shrink
    # below the gap between the point estimate and the nearest decision boundary, ln(1 + delta).
    gap = abs(abs(math.log(ratio)) - math.log1p(delta))
    z = scipy_stats.norm.ppf(0.5 + rule.confidence / 2)
    spread = z * _MEDIAN_SE * sigma
    n_ci = 0 if spread == 0 else MAX_ROUNDS_NEEDED if gap == 0 else min(
        MAX_ROUNDS_NEEDED, math.ceil(2 * (spread / gap) ** 2))
    n = min(MAX_ROUNDS_NEEDED, max(n_test, n_ci, n_now + 1))
    return n, f"need ~{n} rounds/side (test: {n_test}, CI vs delta: {n_ci})"


def speed_ratio(
    baseline_control: Sequence[float], candidate_control: Sequence[float], rule: Rule
) -> SpeedRatio:
    """Machine-speed ratio from the fixed control workload; feed .ratio to compare_family."""
    b = _samples(baseline_control, "baseline control")
    c = _samples(candidate_control, "candidate control")
    ratio = float(np.median(c) / np.median(b))
    return SpeedRatio(ratio, *_ratio_ci(b, c, rule, rule.seed), int(b.size), int(c.size))


@dataclass(frozen=True)
class _Tested:
    """One benchmark's rounds, tested, before Holm over the run."""

    name: str
    b: np.ndarray  # baseline rounds
    c: np.ndarray  # candidate rounds, in baseline-machine time
    median_b: float
    median_c: float
    p: float  # two-sided rank test
    direction: int  # +1: the candidate's rounds rank slower
    ratio: float
    ci_low: float
    ci_high: float


def compare_family(
    pairs: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    rule: Rule,
    thresholds: Mapping[str, float] | None = None,
    groups: Mapping[str, str] | None = None,
    speed_ratio: float | SpeedRatio = 1.0,
) -> tuple[Comparison, ...]:
    """Compare every benchmark of one run: {name: (baseline, candidate)} -> Comparisons.

    ``thresholds`` (resolved with ``threshold_for``) default to ``rule.threshold``; the family
    for Holm is all of ``pairs``. Candidate samples are divided by ``speed_ratio``.
    """
    if not pairs:
        raise ValueError("compare_family: no benchmarks to compare")
    thresholds, groups = dict(thresholds or {}), dict(groups or {})
    for what, keys in (("thresholds", thresholds), ("groups", groups)):
        if unknown := sorted(set(keys) - set(pairs)):
            raise ValueError(f"compare_family: {what} for unknown benchmarks {unknown}")
    r = float(getattr(speed_ratio, "ratio", speed_ratio))
    if not (math.isfinite(r) and r > 0):
        raise ValueError(f"compare_family: speed_ratio must be finite and > 0, got {r!r}")

    rows = []
    for name, (base, cand) in pairs.items():
        b = _samples(base, f"{name}: baseline")
        c = _samples(cand, f"{name}: candidate") / r
        med_b, med_c = float(np.median(b)), float(np.median(c))
        seed = [rule.seed, zlib.crc32(name.encode())]  # per name: independent of family order
        p, direction = _rank_test(b, c)
        rows.append(_Tested(name, b, c, med_b, med_c, p, direction, med_c / med_b,
                            *_ratio_ci(b, c, rule, seed)))

    m = len(rows)
    p_adj = holm([row.p for row in rows])
    out = []
    for row, pa in zip(rows, p_adj, strict=True):
        name, b, c, med_b, med_c = row.name, row.b, row.c, row.median_b, row.median_c
        p, direction, ratio, lo, hi = row.p, row.direction, row.ratio, row.ci_low, row.ci_high
        delta = _check_threshold(thresholds.get(name, rule.threshold), f"thresholds[{name!r}]")
        up, down = 1 + delta, 1 / (1 + delta)
        significant = pa <= rule.alpha
        min_p = _min_p(b.size, c.size)  # the exact rank test's floor at these rounds
        ci = f"CI [{lo:.3f}, {hi:.3f}]"
        needed = None
        # "Unchanged" only with enough rounds that a change could have been detected: at tiny
        # n the percentile bootstrap of a median badly under-covers, and "unchanged" is a pass.
        verdict = decide(significant, direction, lo, hi, delta, min_p <= rule.alpha / m)
        if verdict is Verdict.REGRESSION:
            reason = f"slower: {ci} above {up:.3f}, p_adj={pa:.2g}"
        elif verdict is Verdict.IMPROVEMENT:
            reason = f"faster: {ci} below {down:.3f}, p_adj={pa:.2g}"
        elif verdict is Verdict.UNCHANGED:
            reason = f"{ci} within [{down:.3f}, {up:.3f}]"
        else:
            if min_p > rule.alpha / m:
                why = (f"too few rounds ({b.size}/{c.size}): best exact p {min_p:.2g} > "
                       f"alpha/m = {rule.alpha / m:.2g}")
            elif significant:
                why = f"significant (p_adj={pa:.2g}) but {ci} straddles the +/-{delta:.0%} band"
            else:
                why = f"not significant (p_adj={pa:.2g}) and {ci} not within +/-{delta:.0%}"
            needed, plan = _rounds_needed(b, c, ratio, delta, rule, m, min(b.size, c.size))
            reason = f"{why}; {plan}"
        out.append(Comparison(
            name=name, group=groups.get(name), n_baseline=int(b.size), n_candidate=int(c.size),
            baseline_median=med_b, candidate_median=med_c, ratio=ratio, ci_low=lo, ci_high=hi,
            p_value=p, p_adjusted=float(pa), threshold=delta, verdict=verdict,
            rounds_needed=needed, reason=reason, speed_ratio=r))
    return tuple(out)


def decide(significant: bool, direction: float, low: float, high: float, threshold: float,
           could_detect: bool = True) -> Verdict:
    """The one rule every comparison answers to (stored rounds here, the noise between runs
    in `stored`, pairs in `sequential`): a regression or an improvement needs the test's
    significance in its direction and the whole interval beyond the threshold (1 + delta, or
    1 / (1 + delta): symmetric in log-ratio); unchanged needs the whole interval within both,
    and a sample that could have detected a change at all (`could_detect`); anything else is
    inconclusive."""
    up, down = 1 + threshold, 1 / (1 + threshold)
    if significant and direction > 0 and low > up:
        return Verdict.REGRESSION
    if significant and direction < 0 and high < down:
        return Verdict.IMPROVEMENT
    if could_detect and down <= low and high <= up:
        return Verdict.UNCHANGED
    return Verdict.INCONCLUSIVE


def summarize(comparisons: Sequence[Comparison]) -> dict[str, int]:
    """Count of each verdict (all four keys, by string value), e.g. for a run summary line."""
    counts = {v.value: 0 for v in Verdict}
    for comp in comparisons:
        counts[comp.verdict.value] += 1
    return counts
