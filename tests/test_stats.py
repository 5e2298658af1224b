"""Tests for llmbench.gate.stats: hand-computed values, edge cases, and seeded simulations.

Simulations draw log-normal timings (sigma = sqrt(ln(1 + CV^2))) and use a reduced bootstrap
(n_resamples=500) to stay cheap; nothing here measures wall-clock time.
"""

import dataclasses
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from llmbench.gate.stats import (
    DEFAULT_THRESHOLDS,
    Comparison,
    Rule,
    ThresholdOverrides,
    Verdict,
    compare_family,
    holm,
    speed_ratio,
    summarize,
    threshold_for,
)

SIM_RULE = Rule(n_resamples=500)
FAMILY = 25
RUNS = 200
ROUNDS = 10  # per side: the quick profile's


def _sigma(cv):
    return np.sqrt(np.log1p(np.square(cv)))


def _one(base, cand, rule=SIM_RULE, **kw) -> Comparison:
    (comp,) = compare_family({"b": (base, cand)}, rule, **kw)
    return comp


def _family(x: np.ndarray) -> dict:
    """x[i, 0] baseline, x[i, 1] candidate of benchmark i."""
    return {f"bench{i}": (x[i, 0], x[i, 1]) for i in range(x.shape[0])}


def _max_alarms(runs: int, rate: float) -> int:
    """Binomial slack: at a true per-run rate of `rate`, P(count > bound) <= 0.1 %."""
    return int(scipy_stats.binom.isf(0.001, runs, rate))


# --- hand-computed -------------------------------------------------------------------------


def test_holm_hand_computed():
    # sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> running max 0.06
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    np.testing.assert_allclose(holm([0.5, 0.6]), [1.0, 1.0])  # 0.5*2 capped at 1
    np.testing.assert_allclose(holm([0.02]), [0.02])
    assert holm([]).shape == (0,)


@pytest.mark.parametrize("bad", [[0.1, float("nan")], [1.2], [-0.1], [[0.1, 0.2]]])
def test_holm_rejects_invalid(bad):
    with pytest.raises(ValueError, match="p-values"):
        holm(bad)


def test_ratio_of_medians_hand_computed():
    comp = _one([1.0, 2.0, 3.0], [3.0, 4.0, 5.0, 100.0])
    assert comp.baseline_median == 2.0
    assert comp.candidate_median == 4.5
    assert comp.ratio == pytest.approx(2.25)
    assert (comp.n_baseline, comp.n_candidate) == (3, 4)


def test_speed_ratio_hand_computed():
    sr = speed_ratio([1.0, 1.0, 1.1, 1.2], [2.0, 2.2, 2.4], SIM_RULE)
    assert sr.ratio == pytest.approx(2.2 / 1.05)
    assert sr.ci_low <= sr.ratio <= sr.ci_high
    assert (sr.n_baseline, sr.n_candidate) == (4, 3)
    single = speed_ratio([1.0], [1.1], SIM_RULE)
    assert (single.ci_low, single.ci_high) == (0.0, math.inf)


def test_matches_scipy_bootstrap_and_exact_mannwhitneyu():
    rng = np.random.default_rng(11)
    base, cand = rng.lognormal(0, 0.05, 40), rng.lognormal(0.1, 0.05, 31)
    comp = _one(base, cand, rule=Rule(n_resamples=20_000))

    def ratio(x, y, axis=-1):
        return np.median(y, axis=axis) / np.median(x, axis=axis)

    ref = scipy_stats.bootstrap((base, cand), ratio, n_resamples=20_000, vectorized=True, rng=1,
                          confidence_level=0.90, method="percentile").confidence_interval
    assert comp.ci_low == pytest.approx(ref.low, rel=3e-3)
    assert comp.ci_high == pytest.approx(ref.high, rel=3e-3)
    for n_b, n_c in [(10, 10), (7, 12), (1, 5)]:
        base, cand = rng.lognormal(0, 0.05, n_b), rng.lognormal(0.03, 0.05, n_c)
        exact = scipy_stats.mannwhitneyu(cand, base, method="exact").pvalue
        assert _one(base, cand).p_value == pytest.approx(max(exact, 2 / math.comb(n_b + n_c, n_b)))


# --- edge cases ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "cand", "match"),
    [
        ([], [1.0], "no samples"),
        ([1.0], [], "no samples"),
        ([1.0, 0.0], [1.0], "finite and > 0"),
        ([1.0, -1.0], [1.0], "finite and > 0"),
        ([1.0, float("nan")], [1.0], "finite and > 0"),
        ([1.0], [float("inf")], "finite and > 0"),
        ([[1.0, 2.0]], [1.0], "1-D"),
    ],
)
def test_invalid_samples_raise(base, cand, match):
    with pytest.raises(ValueError, match=match):
        _one(base, cand)


def test_invalid_family_arguments_raise():
    pair = {"a": ([1.0, 2.0], [1.0, 2.0])}
    with pytest.raises(ValueError, match="no benchmarks"):
        compare_family({}, SIM_RULE)
    with pytest.raises(ValueError, match="unknown benchmarks"):
        compare_family(pair, SIM_RULE, thresholds={"typo": 0.1})
    with pytest.raises(ValueError, match="unknown benchmarks"):
        compare_family(pair, SIM_RULE, groups={"typo": "g"})
    with pytest.raises(ValueError, match="threshold"):
        compare_family(pair, SIM_RULE, thresholds={"a": 0.0})
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="speed_ratio"):
            compare_family(pair, SIM_RULE, speed_ratio=bad)


@pytest.mark.parametrize(
    "kwargs",
    [{"threshold": 0}, {"alpha": 0}, {"alpha": 0.5}, {"confidence": 1.0},
     {"n_resamples": 10}, {"n_resamples": 2000.0}, {"seed": -1}],
)
def test_rule_validation(kwargs):
    with pytest.raises(ValueError, match="Rule"):
        Rule(**kwargs)


def test_rule_confidence_derived_from_alpha():
    assert Rule(alpha=0.05).confidence == pytest.approx(0.90)
    assert Rule(alpha=0.05, confidence=0.95).confidence == 0.95


def test_one_sample_per_side_is_inconclusive_without_nan():
    comp = _one([1.0], [5.0])
    assert comp.verdict is Verdict.INCONCLUSIVE
    assert (comp.ci_low, comp.ci_high) == (0.0, math.inf)
    assert comp.p_value == 1.0
    assert comp.rounds_needed is not None and comp.rounds_needed > 1
    assert "1 round" in comp.reason


def test_zero_variance_identical_is_unchanged_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        comp = _one([0.01] * 10, [0.01] * 10)
    assert comp.verdict is Verdict.UNCHANGED
    assert (comp.p_value, comp.ratio, comp.ci_low, comp.ci_high) == (1.0, 1.0, 1.0, 1.0)
    assert comp.rounds_needed is None


@pytest.mark.parametrize("n", [6, 10])  # tie-aware exact enumeration (6), asymptotic (10)
def test_zero_variance_shifted_is_regression_without_warnings(n):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        comp = _one([1.0] * n, [1.3] * n)
    assert comp.verdict is Verdict.REGRESSION
    exact = 2 / math.comb(2 * n, n)  # total separation
    assert comp.p_value == pytest.approx(exact) if n == 6 else comp.p_value >= exact


def test_ties_never_beat_the_exact_minimum():
    # Normal approximation would give p = 0.047 here; the exact conditional test gives 0.1.
    comp = _one([1.0] * 3, [2.0] * 3)
    assert comp.p_value == pytest.approx(0.1)
    assert comp.verdict is Verdict.INCONCLUSIVE


def test_unequal_sizes():
    rng = np.random.default_rng(1)
    comp = _one(rng.lognormal(0, 0.03, 8), 1.3 * rng.lognormal(0, 0.03, 15))
    assert (comp.n_baseline, comp.n_candidate) == (8, 15)
    assert comp.verdict is Verdict.REGRESSION


def test_three_rounds_are_inconclusive_with_rounds_needed():
    rng = np.random.default_rng(2)
    x = rng.lognormal(0, _sigma(0.03), (FAMILY, 2, 3))
    x[0, 1] *= 1.5  # even a blatant 50 % slowdown cannot be significant with 3 vs 3
    comps = compare_family(_family(x), SIM_RULE)
    assert all(c.verdict is Verdict.INCONCLUSIVE for c in comps)
    assert all(c.rounds_needed is not None and c.rounds_needed > 3 for c in comps)
    # 2 / C(2n, n) <= 0.05 / 25 first holds at n = 7.
    assert all(c.rounds_needed >= 7 for c in comps)
    assert "too few rounds" in comps[0].reason


def test_rounds_needed_follows_dispersion():
    rng = np.random.default_rng(3)
    base = rng.lognormal(0, _sigma(0.10), 10)
    comp = _one(base, base * 1.10)  # point estimate exactly on the boundary 1 + delta
    assert comp.verdict is Verdict.INCONCLUSIVE
    assert comp.rounds_needed > 10


def test_significant_small_change_is_unchanged():
    rng = np.random.default_rng(4)
    comp = _one(rng.lognormal(0, 0.005, 20), 1.03 * rng.lognormal(0, 0.005, 20))
    assert comp.p_adjusted < 0.001
    assert comp.verdict is Verdict.UNCHANGED


def test_swap_mirrors_verdict():
    rng = np.random.default_rng(5)
    base, cand = rng.lognormal(0, 0.03, 10), 1.3 * rng.lognormal(0, 0.03, 10)
    assert _one(base, cand).verdict is Verdict.REGRESSION
    assert _one(cand, base).verdict is Verdict.IMPROVEMENT


def test_results_do_not_depend_on_family_order():
    rng = np.random.default_rng(6)
    fam = _family(rng.lognormal(0, 0.05, (4, 2, 10)))
    forward = {c.name: c for c in compare_family(fam, SIM_RULE)}
    backward = {c.name: c for c in compare_family(dict(reversed(fam.items())), SIM_RULE)}
    assert forward == backward


def test_records_are_immutable_and_verdicts_are_strings():
    comp = _one([1.0, 1.1], [1.0, 1.1])
    with pytest.raises(dataclasses.FrozenInstanceError):
        comp.verdict = Verdict.REGRESSION
    assert Verdict.REGRESSION == "regression" and str(Verdict.UNCHANGED) == "unchanged"


def test_summarize_and_groups():
    rng = np.random.default_rng(7)
    x = rng.lognormal(0, 0.02, (3, 2, 10))
    x[0, 1] *= 1.5
    comps = compare_family(_family(x), SIM_RULE, groups={"bench0": "decode"})
    assert comps[0].group == "decode" and comps[1].group is None
    assert summarize(comps) == {"regression": 1, "improvement": 0, "unchanged": 2,
                                "inconclusive": 0,
                                "not confirmed": 0, "not slower": 0}


@settings(max_examples=60, deadline=None, database=None)
@given(
    base=st.lists(st.floats(1e-6, 10.0), min_size=1, max_size=12),
    cand=st.lists(st.floats(1e-6, 10.0), min_size=1, max_size=12),
    scale=st.sampled_from([1e-3, 1.0, 7.0]),
)
def test_any_valid_input_gets_a_verdict_and_no_nan(base, cand, scale):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        comp = _one(np.array(base) * scale, np.array(cand) * scale)
    assert comp.verdict in set(Verdict)
    assert not any(map(math.isnan, (comp.ratio, comp.ci_low, comp.ci_high, comp.p_adjusted)))
    assert comp.ci_low <= comp.ci_high
    assert (comp.rounds_needed is None) == (comp.verdict is not Verdict.INCONCLUSIVE)


# --- thresholds ----------------------------------------------------------------------------


def test_threshold_precedence():
    o = ThresholdOverrides(benchmarks={"gen": 0.01}, groups={"decode": 0.02}, run=0.03)
    assert threshold_for("gen", "decode", "cuda", o) == 0.01
    assert threshold_for("other", "decode", "cuda", o) == 0.02
    assert threshold_for("other", "prefill", "cuda", o) == 0.03
    assert threshold_for("other", None, "cuda", ThresholdOverrides(groups={"decode": 0.02})) == 0.05
    assert threshold_for("x", None, "cpu") == DEFAULT_THRESHOLDS["cpu"] == 0.10
    assert threshold_for("x", None, "cuda:1") == 0.05
    assert threshold_for("x", None, "MPS") == 0.05
    assert threshold_for("x", None, "xpu", ThresholdOverrides(run=0.2)) == 0.2


def test_threshold_errors():
    with pytest.raises(ValueError, match="xpu"):
        threshold_for("x", None, "xpu")
    with pytest.raises(ValueError, match="threshold"):
        ThresholdOverrides(groups={"g": -0.1})
    with pytest.raises(ValueError, match="threshold"):
        ThresholdOverrides(run=float("inf"))


def test_per_benchmark_threshold_is_used():
    rng = np.random.default_rng(8)
    base, cand = rng.lognormal(0, 0.01, 10), 1.07 * rng.lognormal(0, 0.01, 10)
    assert _one(base, cand).verdict is Verdict.UNCHANGED  # 7 % is within 10 %
    tight = _one(base, cand, thresholds={"b": 0.03})
    assert tight.verdict is Verdict.REGRESSION and tight.threshold == 0.03


# --- simulations ---------------------------------------------------------------------------


def test_aa_familywise_false_alarm_rate():
    """A/A: 200 runs of 25 benchmarks, CV 3-10 %, ROUNDS per side."""
    rng = np.random.default_rng(20240601)
    any_regression = any_claim = 0
    for _ in range(RUNS):
        sigma = _sigma(rng.uniform(0.03, 0.10, FAMILY))[:, None, None]
        comps = compare_family(_family(rng.lognormal(0, sigma, (FAMILY, 2, ROUNDS))),
                               SIM_RULE)
        any_regression += any(c.verdict is Verdict.REGRESSION for c in comps)
        # The Holm part alone (either direction), which carries the familywise guarantee:
        any_claim += any(c.p_adjusted <= SIM_RULE.alpha for c in comps)
    # Slack: a true rate of exactly alpha exceeds this bound with probability < 0.1 %.
    assert any_claim <= _max_alarms(RUNS, SIM_RULE.alpha)
    assert any_regression <= _max_alarms(RUNS, SIM_RULE.alpha)


def test_power_for_a_20_percent_slowdown():
    """One benchmark of 25 is 20 % slower, CV 5 %, delta 10 %: flagged in >= 90 % of runs."""
    rng = np.random.default_rng(20240602)
    hits = 0
    for _ in range(RUNS):
        x = rng.lognormal(0, _sigma(0.05), (FAMILY, 2, ROUNDS))
        x[0, 1] *= 1.2
        comps = compare_family(_family(x), SIM_RULE)
        hits += comps[0].verdict is Verdict.REGRESSION
    assert hits / RUNS >= 0.90


def test_speedup_is_improvement_never_regression():
    rng = np.random.default_rng(9)
    verdicts = []
    for _ in range(40):
        x = rng.lognormal(0, _sigma(0.05), (2, ROUNDS))
        verdicts.append(_one(x[0], x[1] / 1.2).verdict)
    assert Verdict.REGRESSION not in verdicts
    assert verdicts.count(Verdict.IMPROVEMENT) >= 36


def test_speed_normalization_separates_machine_from_code():
    rng = np.random.default_rng(10)
    slow = 1.15  # the candidate machine is uniformly 15 % slower; the code did not change
    x = rng.lognormal(0, _sigma(0.03), (10, 2, ROUNDS))
    x[:, 1] *= slow
    control = rng.lognormal(0, _sigma(0.02), (2, ROUNDS))
    sr = speed_ratio(control[0], control[1] * slow, SIM_RULE)
    assert sr.ci_low > 1.0  # the control sees the slowdown

    raw = compare_family(_family(x), SIM_RULE)
    assert summarize(raw)["regression"] >= 8
    normalized = compare_family(_family(x), SIM_RULE, speed_ratio=sr)
    assert summarize(normalized)["regression"] == 0
    assert all(c.speed_ratio == sr.ratio for c in normalized)
    assert normalized[0].candidate_median == pytest.approx(raw[0].candidate_median / sr.ratio)
