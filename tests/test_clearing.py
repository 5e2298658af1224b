"""Clearing a confirmation's candidates: one test that none is past the threshold, at the
unsplit alpha (`sequential`, Clearing), so a family of slower candidates that the machine's
drift made is decided within a budget that naming each at alpha / M could not.

The family tests drive the coordinator with the scripted workers of `test_focus` on a fake
clock: what is asserted is what was decided and how many pairs it took, never a timing.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pairing_clock
import pytest
from test_focus import THRESHOLD, Scripted

from llmbench import runs
from llmbench.ab import pairing
from llmbench.gate import confirm_plan, sequential, stored
from llmbench.gate.stats import Comparison, Verdict

DESIGN = sequential.Design()
UP = math.log1p(THRESHOLD)


def test_eight_pairs_all_below_the_threshold_clear_a_candidate():
    d = np.log(1.0) + np.linspace(-0.05, 0.06, 8)
    cleared = sequential.clears(d, DESIGN, THRESHOLD)
    assert cleared is not None and cleared.n == 8
    # At 8 pairs the upper bound is the largest pair's ratio.
    assert cleared.ci_high == pytest.approx(math.exp(d.max()))
    assert sequential.clears(d[:7], DESIGN, THRESHOLD) is None  # before the first look
    one_above = np.append(d[:7], UP + 0.01)
    assert sequential.clears(one_above, DESIGN, THRESHOLD) is None
    # Naming each of 20 candidates at alpha / 20 leaves the same pairs no interval at all.
    split = sequential.estimate(d, sequential.Design(alpha=DESIGN.alpha / 20))
    assert split.ci_high == math.inf


def test_a_candidate_at_the_threshold_is_cleared_at_most_alpha_of_the_time():
    """The level the intersection-union argument rests on: a candidate truly slower by the
    threshold itself, its pairs looked at at every look up to 120, cleared at any of them
    in at most alpha of the draws (the confidence sequence's one-sided error)."""
    rng = np.random.default_rng(11)
    draws, cleared = 400, 0
    for _ in range(draws):
        d = UP + rng.normal(0, 0.08, DESIGN.max_pairs)
        cleared += any(sequential.clears(d[:k], DESIGN, THRESHOLD) for k in DESIGN.looks)
    assert cleared / draws <= DESIGN.alpha


def test_clearing_is_refused_where_the_interval_says_slower_beyond_the_threshold():
    rng = np.random.default_rng(2)
    slower = math.log(1.3) + rng.normal(0, 0.05, 40)
    assert all(sequential.clears(slower[:k], DESIGN, THRESHOLD) is None for k in DESIGN.looks
               if k <= slower.size)


# Twelve candidates the drift made (the same speed in pairs) and one real 30% slowdown, 1 s
# a pair, rounds spread 3% as on a quiet machine, in a budget that holds about 12 pairs a
# candidate. They are the first pass of a family of 30 slower benchmarks, so naming a
# regression is tested at alpha * 13 / 30 in it (`confirm`).
FAMILY = {**{f"drift_{i:02d}": 1.0 for i in range(12)}, "decode": 1.3}
BUDGET_S = 160
PASS = sequential.Design(alpha=DESIGN.alpha * len(FAMILY) / 30)


class Quiet(Scripted):
    NOISE = 0.03

    def __init__(self, clock, seed=5, clearing=None):
        super().__init__(clock, FAMILY, BUDGET_S, focused=True, seed=seed, clearing=clearing,
                         design=PASS)


DECIDED = (pairing.CLEARED, "unchanged")


def test_a_family_of_drift_candidates_is_cleared_and_the_real_one_confirmed(clock):
    scripted = Quiet(clock, clearing=DESIGN)
    records = scripted.judge()
    assert records["decode"].stopped == "regression"
    drift = {n: r for n, r in records.items() if n.startswith("drift")}
    assert all(r.stopped in DECIDED for r in drift.values())
    at_first_look = [n for n in drift if len(scripted.workers["candidate"].timed[n]) == 8]
    assert len(at_first_look) >= 8
    assert all(drift[n].stopped == pairing.CLEARED for n in at_first_look)
    assert scripted.to_json()["design"]["clearing_alpha"] == DESIGN.alpha


def test_without_clearing_the_same_budget_leaves_candidates_undecided(clock):
    """Before clearing, a drift candidate had to be proven unchanged at the pass's share of
    alpha, which no interval reaches at 8 pairs: each took 12, and the real slowdown was left
    with too few to be confirmed."""
    records = Quiet(clock).judge()
    assert {n: r.stopped for n, r in records.items()} == {
        **{n: "unchanged" for n in FAMILY if n.startswith("drift")}, "decode": "budget"}


def test_over_many_seeds_the_family_is_decided_and_nothing_same_speed_is_condemned(
        monkeypatch):
    outcomes = []
    for seed in range(30):
        clock = pairing_clock.install(monkeypatch)
        records = Quiet(clock, seed=seed, clearing=DESIGN).judge()
        outcomes.append({n: r.stopped for n, r in records.items()})
    assert all(o[n] != "regression" for o in outcomes for n in o if n.startswith("drift"))
    every_drift_decided = sum(all(o[n] in DECIDED for n in o if n.startswith("drift"))
                              for o in outcomes)
    assert every_drift_decided == len(outcomes)
    assert all(o["decode"] == "regression" for o in outcomes)


def test_a_cleared_candidate_carries_its_clearing_interval_and_settles_as_a_pass():
    rng = np.random.default_rng(4)
    base = list(0.5 * np.exp(rng.normal(0, 0.03, 8)))
    cand = [b * math.exp(rng.normal(0, 0.03)) for b in base]
    split = sequential.Design(alpha=DESIGN.alpha / 13)
    (plain,) = sequential.judge_family({"a": (base, cand)}, {"a": THRESHOLD}, split)
    (judged,) = sequential.judge_family({"a": (base, cand)}, {"a": THRESHOLD}, split,
                                        clearing=DESIGN)
    assert plain.verdict is judged.verdict is Verdict.INCONCLUSIVE
    assert plain.ci_high == math.inf and judged.ci_high < 1 + THRESHOLD
    assert judged.reason.startswith("cleared") and judged.rounds_needed is None
    stored_slower = Comparison(
        name="a", group=None, n_baseline=10, n_candidate=10, baseline_median=0.5,
        candidate_median=0.6, ratio=1.2, ci_low=1.1, ci_high=1.3, p_value=0.01,
        p_adjusted=0.01, threshold=THRESHOLD, verdict=Verdict.NOT_CONFIRMED,
        rounds_needed=None, reason="slower in the stored runs")
    (settled,) = stored.settle([stored_slower], {"a": judged})
    assert settled.verdict is Verdict.NOT_SLOWER and "not slower beyond +10%" in settled.reason


def test_a_drift_candidate_is_costed_at_the_first_look_that_can_clear_it():
    """Whatever its stored rounds' spread: pairs spread far less than rounds of runs apart,
    and the plan that costed them from the rounds left candidates out and budget unspent."""
    rounds = np.exp(np.random.default_rng(0).normal(0, 0.15, 30))
    base = runs.Benchmark(key="a", name="a", group=None, extra_info={}, samples=tuple(rounds),
                          summary={"median": float(np.median(rounds))})
    slower = Comparison(
        name="a", group=None, n_baseline=30, n_candidate=30, baseline_median=1.0,
        candidate_median=1.2, ratio=1.2, ci_low=1.1, ci_high=1.3, p_value=0.01,
        p_adjusted=0.01, threshold=THRESHOLD, verdict=Verdict.NOT_CONFIRMED,
        rounds_needed=None, reason="slower in the stored runs")
    run = runs.Run(source="r", benchmarks={"a": base}, environment={})
    estimate = confirm_plan.plan([slower], run, run, budget_s=1000).estimates["a"]
    assert estimate.pairs == estimate.first_look == confirm_plan.fewest_to_clear(DESIGN) == 8
    regression = confirm_plan.plan([dataclasses.replace(slower, verdict=Verdict.REGRESSION)],
                                   run, run, budget_s=1000).estimates["a"]
    assert regression.pairs > 8
