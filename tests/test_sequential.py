"""The paired, group-sequential judgement: false alarms under its own stopping rule, power
against its closed form, and the verdicts it gives. Simulations are seeded.

A simulated comparison is what `llmbench ab` does to m benchmarks: pairs of rounds taken
ABBA, each round's log time = a slow drift shared by the machine + round noise (+ the
effect on the candidate's rounds), pairs added until `stop_decision` stops the benchmark or
`max_pairs` is reached, then `judge_family` with Holm over the run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from llmbench.gate import sequential
from llmbench.gate.sequential import Design
from llmbench.gate.stats import Verdict

M = 5  # benchmarks per run, as in the quick `decode or prefill` selection


def _pair_stream(rng, n: int, effect: float, noise: float, drift: float, tails: str):
    """Log-ratios of n pairs: drift is a random walk per round (the machine's slow change,
    which pairing cancels but for one step), noise normal or t(3)-tailed per round."""
    steps = 2 * n
    walk = np.cumsum(rng.normal(0, drift, steps))
    if tails == "normal":
        round_noise = rng.normal(0, noise, steps)
    else:  # heavy tails (the odd descheduled round), scaled to the same sd
        round_noise = rng.standard_t(3, steps) * noise / math.sqrt(3)
    log_t = walk + round_noise
    first, second = log_t[0::2], log_t[1::2]
    baseline_first = np.arange(n) % 2 == 0  # ABBA by pair
    base = np.where(baseline_first, first, second)
    cand = np.where(baseline_first, second, first) + math.log(effect)
    return cand - base


def _simulated_run(rng, design: Design, threshold: float, effects, noise=0.05, drift=0.01,
                   tails="normal"):
    pairs = {}
    for i, effect in enumerate(effects):
        d = _pair_stream(rng, design.max_pairs, effect, noise, drift, tails)
        n = next((k for k in design.looks
                  if sequential.stop_decision(d[:k], design, threshold, len(effects))),
                 design.max_pairs)
        # judge_family takes samples; any baseline with these log-ratios will do.
        pairs[f"b{i}"] = (np.ones(n), np.exp(d[:n]))
    thresholds = dict.fromkeys(pairs, threshold)
    return sequential.judge_family(pairs, thresholds, design)


@pytest.mark.parametrize("threshold, tails", [(0.02, "normal"), (0.02, "heavy"),
                                              (0.10, "normal")])
def test_aa_family_wise_false_alarms_stay_below_alpha_under_the_stopping_rule(threshold,
                                                                               tails):
    rng = np.random.default_rng(12)
    design = Design(alpha=0.05, max_pairs=120)
    runs = 2000
    false_alarms = 0
    for _ in range(runs):
        verdicts = [c.verdict for c in _simulated_run(rng, design, threshold, [1.0] * M,
                                                      tails=tails)]
        false_alarms += any(v in (Verdict.REGRESSION, Verdict.IMPROVEMENT) for v in verdicts)
    assert false_alarms / runs <= design.alpha, false_alarms


def test_a_pair_is_looked_at_only_at_the_looks():
    design = Design(max_pairs=120)
    assert design.looks == (8, 12, 18, 27, 40, 61, 91, 120)
    assert design.look_alpha == pytest.approx(0.05 / 8)
    d = np.full(13, 0.5) + np.linspace(-1e-3, 1e-3, 13)  # an obvious regression
    assert sequential.stop_decision(d[:7], design, 0.1, 1) is None  # before the first look
    # 8 pairs all one way: the smallest signed-rank p, 2 / 2**8, times K looks is > alpha.
    assert sequential.stop_decision(d[:8], design, 0.1, 1) is None
    assert sequential.stop_decision(d[:12], design, 0.1, 1) is Verdict.REGRESSION
    assert sequential.stop_decision(d[:13], design, 0.1, 1) is None  # between looks
    # Unchanged needs no p: 8 pairs inside the band decide it at the first look.
    assert sequential.stop_decision(d[:8] - 0.5, design, 0.1, 1) is Verdict.UNCHANGED
    assert Design(max_pairs=8).looks == (8,)
    with pytest.raises(ValueError, match="max_pairs"):
        Design(max_pairs=7)


@pytest.mark.parametrize("effect, n, threshold", [(1.05, 27, 0.02), (1.05, 40, 0.02),
                                                  (1.03, 61, 0.01)])
def test_power_of_one_look_matches_the_closed_form(effect, n, threshold):
    """The share of simulated looks at n pairs whose signed-rank interval clears
    1 + threshold agrees with the large-sample closed form, within three standard errors
    and the approximation's own few points at these sizes (from ~27 pairs; at 12 the exact
    interval is coarser, and the closed form overstates its power by ~0.15)."""
    design, sd = Design(max_pairs=120), 0.05
    rng = np.random.default_rng(n)
    sims = 1500
    d = rng.normal(math.log(effect), sd, (sims, n))
    lows = np.array([sequential.walsh_interval(row, design.look_alpha)[1] for row in d])
    observed = np.mean(lows > math.log1p(threshold))
    expected = sequential.power(effect, sd, n, threshold, design)
    assert 0.2 < expected < 0.95  # a size where the comparison means something
    assert abs(observed - expected) < 3 * math.sqrt(expected * (1 - expected) / sims) + 0.04


def test_the_signed_rank_interval_ignores_an_outlier_that_ruins_a_mean():
    rng = np.random.default_rng(4)
    d = rng.normal(math.log(1.15), 0.03, 27)
    d[5] = -1.4  # one round descheduled: 4x slower on the baseline's side
    centre, low, high = sequential.walsh_interval(d, Design().look_alpha)
    p = sequential._signed_rank_p(d)
    assert math.exp(low) > 1.10 and 1.12 < math.exp(centre) < 1.18 and p < 1e-4
    assert d.mean() < math.log(1.12)  # the mean is dragged below the effect


def test_the_exact_signed_rank_distribution_matches_scipy():
    rng = np.random.default_rng(9)
    for n in (8, 12, 27):
        d = rng.normal(0.02, 0.05, n)
        p = sequential._signed_rank_p(d)
        exact = scipy_stats.wilcoxon(d, method="exact").pvalue
        assert p == pytest.approx(exact, rel=1e-9)


def test_the_sequential_design_is_at_least_as_powerful_as_its_planned_look():
    design, threshold, effect = Design(max_pairs=61), 0.02, 1.05
    rng = np.random.default_rng(3)
    runs = 400
    found = sum(_simulated_run(rng, design, threshold, [effect], drift=0.0)[0].verdict
                is Verdict.REGRESSION for _ in range(runs))
    # Round noise 0.05 on each side: a pair's log-ratio spreads by 0.05 * sqrt(2).
    planned = sequential.power(effect, 0.05 * math.sqrt(2), 61, threshold, design)
    assert found / runs >= planned - 3 * math.sqrt(planned * (1 - planned) / runs)


def test_a_clear_slowdown_stops_early_and_is_a_regression_with_the_ratio_of_the_pairs():
    rng = np.random.default_rng(5)
    design = Design()
    (c,) = _simulated_run(rng, design, 0.10, [1.3])
    assert c.verdict is Verdict.REGRESSION and c.n_pairs == 12 and c.unit == "pairs"
    assert 1.2 < c.ratio < 1.4 and c.ci_low > 1.1 and c.rounds_needed is None


def test_an_undecided_benchmark_says_how_many_pairs_should_decide_it():
    rng = np.random.default_rng(6)
    design = Design(max_pairs=120)
    d = rng.normal(math.log(1.05), 0.05, 12)
    (c,) = sequential.judge_family({"x": (np.ones(12), np.exp(d))}, {"x": 0.02}, design)
    assert c.verdict is Verdict.INCONCLUSIVE
    assert c.rounds_needed > 12 and "pairs should decide" in c.reason
    (few,) = sequential.judge_family({"x": (np.ones(5), np.exp(d[:5]))}, {"x": 0.02}, design)
    assert few.verdict is Verdict.INCONCLUSIVE and few.rounds_needed == 8
    assert "fewer than the first look" in few.reason


def test_holm_over_the_run_and_the_sequential_p_value():
    design = Design(max_pairs=8)
    rng = np.random.default_rng(8)
    clear = np.exp(rng.normal(0.4, 0.02, 8))
    flat = np.exp(rng.normal(0.0, 0.02, 8))
    pairs = {"slow": (np.ones(8), clear), "same": (np.ones(8), flat)}
    out = {c.name: c for c in sequential.judge_family(pairs, dict.fromkeys(pairs, 0.1), design)}
    assert out["slow"].verdict is Verdict.REGRESSION
    assert out["same"].verdict is Verdict.UNCHANGED
    est = sequential.estimate(np.log(clear), design)
    assert out["slow"].p_value == pytest.approx(est.p_value)
    assert out["slow"].p_adjusted == pytest.approx(min(1.0, 2 * est.p_value))


def test_log_ratios_pair_round_i_with_round_i_and_refuse_bad_timings():
    d = sequential.log_ratios([1.0, 2.0, 4.0], [2.0, 2.0])
    assert d.tolist() == pytest.approx([math.log(2), 0.0])
    with pytest.raises(ValueError, match="finite and > 0"):
        sequential.log_ratios([1.0, 0.0], [1.0, 1.0])
