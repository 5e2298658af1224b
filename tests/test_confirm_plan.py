"""Which slower benchmarks the confirmation re-measures: those its budget can decide,
cheapest to decide first (llmbench.bench.confirm_plan), on seeded synthetic runs."""

from __future__ import annotations

import dataclasses
import math

import pytest
from gate_runs import make_run

from llmbench import gate
from llmbench.bench import confirm, confirm_plan
from llmbench.errors import UserError
from llmbench.gate import sequential, stored
from llmbench.gate.sequential import Design
from llmbench.gate.stats import Verdict
from llmbench.runs import run_from_json

A, B = "a" * 40, "b" * 40
CHEAP = "benchmarks/test_prefill_decode.py::test_decode_steps[ctx=16]"
DEAR = "benchmarks/test_prefill_decode.py::test_decode_steps[ctx=128]"


def _run(seed, commit, *, factors=None, scale=1.0, compile_s=None, load_s=2.0):
    data = make_run(seed, factors=factors)
    data["commit_info"] = {"id": commit, "dirty": False}
    data["llmbench"].update(load_s=load_s, warmup_s=load_s)
    for bench in data["benchmarks"]:
        bench["stats"]["data"] = [x * scale for x in bench["stats"]["data"]]
        bench["stats"]["median"] *= scale
        if compile_s is not None and bench["fullname"] == DEAR:
            bench["extra_info"]["compile"] = {"warmup_s": compile_s, "graphs": 1}
    return run_from_json(data, f"run{seed}")


def _candidates(base, cand):
    result = gate.compare_runs(base, cand)
    return [c for c in result.comparisons if c.verdict is Verdict.NOT_CONFIRMED]


def test_a_larger_margin_over_the_threshold_needs_fewer_pairs():
    base = _run(1, A)
    design = Design()
    bench = base.benchmarks[CHEAP]
    c = next(c for c in _candidates(base, _run(2, B, factors={"decode": 1.5}))
             if c.name == CHEAP)
    far = confirm_plan.pairs_needed(c, bench, bench, design, 2)
    near = confirm_plan.pairs_needed(dataclasses.replace(c, ratio=1.13), bench, bench, design, 2)
    assert confirm_plan.fewest_for_regression(design, 2) <= far < near
    within = confirm_plan.pairs_needed(dataclasses.replace(c, ratio=1.05), bench, bench,
                                       design, 2)
    assert within == design.max_pairs  # a ratio inside the threshold cannot be confirmed


def test_the_cheapest_to_decide_go_first_and_the_budget_holds():
    base, cand = _run(1, A, scale=20), _run(2, B, factors={"decode": 1.5}, scale=20)
    candidates = _candidates(base, cand)
    assert {c.name for c in candidates} == {CHEAP, DEAR}
    wide = confirm_plan.plan(candidates, base, cand, budget_s=100_000)
    assert set(wide.chosen) == {CHEAP, DEAR} and not wide.left
    costs = wide.estimates
    cheap, dear = sorted(costs.values(), key=lambda e: e.seconds)
    tight = confirm_plan.plan(candidates, base, cand,
                              budget_s=wide.start_s + cheap.seconds + dear.seconds / 2)
    assert tight.chosen == (cheap.name,) and tight.left == (dear.name,)
    # A budget too small for anything still tries the cheapest one.
    tiny = confirm_plan.plan(candidates, base, cand, budget_s=1)
    assert tiny.chosen == (cheap.name,)


def test_stored_regressions_go_first_even_when_dearer():
    base, cand = _run(1, A, scale=20), _run(2, B, factors={"decode": 1.5}, scale=20)
    candidates = _candidates(base, cand)
    costs = confirm_plan.plan(candidates, base, cand, budget_s=100_000).estimates
    cheap, dear = sorted(costs.values(), key=lambda e: e.seconds)
    marked = [dataclasses.replace(c, verdict=Verdict.REGRESSION) if c.name == dear.name else c
              for c in candidates]
    tight = confirm_plan.plan(marked, base, cand, budget_s=1)
    assert tight.chosen == (dear.name,) and tight.left == (cheap.name,)


def test_compiling_counts_on_both_sides():
    base = _run(1, A)
    plain = confirm_plan.plan(_candidates(base, _run(2, B, factors={"decode": 1.5})), base,
                              _run(2, B, factors={"decode": 1.5}), budget_s=1000)
    cand = _run(2, B, factors={"decode": 1.5}, compile_s=30)
    compiled = confirm_plan.plan(_candidates(base, cand), base, cand, budget_s=1000)
    assert compiled.estimates[DEAR].seconds == pytest.approx(
        plain.estimates[DEAR].seconds + 60)
    assert compiled.chosen[0] == CHEAP


def _to_first_look(e: confirm_plan.Estimate) -> float:
    """An estimate's seconds to the first look that can decide it (clear it, or confirm a
    stored regression)."""
    return e.seconds - (e.pairs - e.first_look) * e.pair_s


class Clock:
    """confirm's clock: an A/B takes the seconds a test says (`spend`: of its budget)."""

    def __init__(self, spend=1.0):
        self.now, self.spend = 1000.0, spend

    def monotonic(self):
        return self.now

    def ab(self, budget_s):
        self.now += self.spend * budget_s


def _fake_ab(monkeypatch, base, cand, clock, calls):
    """Stands for `run_ab`: every benchmark it is given confirmed, in the clock's time."""
    def fake_ab(rev, **kw):
        calls.append(kw)
        clock.ab(kw["budget_s"])
        keys = [k for k in kw["pytest_args"] if "::" in k]
        stored = gate.compare_runs(base, cand)
        return dataclasses.replace(stored, code=None, comparisons=tuple(
            dataclasses.replace(c, verdict=Verdict.REGRESSION, n_pairs=18, reason="paired")
            for c in stored.comparisons if c.name in keys))

    monkeypatch.setattr("llmbench.ab.run_ab", fake_ab)
    monkeypatch.setattr(confirm, "time", clock)


def test_budget_a_pass_leaves_goes_to_what_it_left_out(monkeypatch):
    """The plan costs candidates from the stored runs' spread; pairs that decide sooner
    leave time, and a further pass spends it on the candidates left out, each pass at its
    share of alpha."""
    base, cand = _run(1, A, scale=20), _run(2, B, factors={"decode": 1.5}, scale=20)
    wide = confirm_plan.plan(_candidates(base, cand), base, cand, budget_s=100_000)
    cheap, dear = sorted(wide.estimates.values(), key=lambda e: e.seconds)
    dear_first_look = _to_first_look(dear)
    budget = wide.start_s + max(cheap.seconds + 1, dear_first_look)
    assert budget < wide.start_s + cheap.seconds + dear.seconds  # the plan leaves dear out
    calls = []
    _fake_ab(monkeypatch, base, cand, Clock(spend=0.0), calls)  # each pass ends at once
    confirmed = confirm.confirm(gate.compare_runs(base, cand), pytest_args=[],
                                budget_s=budget)
    assert [[a for a in kw["pytest_args"] if "::" in a] for kw in calls] == [[cheap.name],
                                                                           [dear.name]]
    alpha = gate.GateOptions().alpha
    assert [kw["options"].alpha for kw in calls] == [pytest.approx(alpha / 2)] * 2
    assert {c.name: c.verdict for c in confirmed.comparisons if c.name in (CHEAP, DEAR)} == {
        CHEAP: Verdict.REGRESSION, DEAR: Verdict.REGRESSION}
    assert confirmed.confirmation["left"] == [] and confirmed.confirmation["passes"] == 2
    assert "2 benchmarks in 0 s (2 passes)" in gate.render_text(confirmed)
    again = stored.apply_recorded(gate.compare_runs(base, cand).comparisons,
                                  confirmed.confirmation)
    assert {c.name: c.verdict for c in again} == {
        c.name: c.verdict for c in confirmed.comparisons}


@pytest.mark.parametrize("family", [1, 2, 17])
def test_the_fewest_pairs_for_a_regression_are_those_the_sequential_test_needs(family):
    """At its share of alpha (1 of `family`), a benchmark whose every pair is 30% slower is a
    regression at `fewest_for_regression` pairs and not at the look before."""
    design = Design()
    fewest = confirm_plan.fewest_for_regression(design, family)
    share = Design(alpha=design.alpha / family)
    slower = [math.log(1.3) + 0.001 * i for i in range(fewest)]
    assert sequential.stop_decision(slower, share, 0.10, 1) is Verdict.REGRESSION
    before = design.looks[design.looks.index(fewest) - 1]
    assert sequential.stop_decision(slower[:before], share, 0.10, 1) is None
    assert fewest == {1: 12, 2: 12, 17: 18}[family]


def test_no_further_pass_without_time_for_the_first_look_of_what_it_takes_first():
    base, cand = _run(1, A, scale=20), _run(2, B, factors={"decode": 1.5}, scale=20)
    candidates = _candidates(base, cand)
    wide = confirm_plan.plan(candidates, base, cand, budget_s=100_000, family=3)
    cheap, dear = sorted(wide.estimates.values(), key=lambda e: e.seconds)

    def first_look(e):
        return wide.start_s + _to_first_look(e)

    assert confirm_plan.another_pass(candidates, base, cand, first_look(cheap), family=3)
    assert confirm_plan.another_pass(candidates, base, cand, first_look(cheap) - 1,
                                     family=3) is None
    # A stored regression goes first, so the pass must reach its first look, not the
    # cheapest one's; confirming it takes more pairs than clearing a candidate.
    marked = [dataclasses.replace(c, verdict=Verdict.REGRESSION) if c.name == dear.name else c
              for c in candidates]
    dear = confirm_plan.plan(marked, base, cand, budget_s=100_000, family=3).estimates[dear.name]
    assert dear.first_look == confirm_plan.fewest_for_regression(Design(), 3) > cheap.first_look
    assert first_look(cheap) < first_look(dear)
    assert confirm_plan.another_pass(marked, base, cand, first_look(cheap), family=3) is None
    assert confirm_plan.another_pass(marked, base, cand, first_look(dear),
                                     family=3).chosen[0] == dear.name


def test_a_further_pass_that_fails_keeps_what_the_first_decided(monkeypatch):
    base, cand = _run(1, A, scale=20), _run(2, B, factors={"decode": 1.5}, scale=20)
    calls = []
    _fake_ab(monkeypatch, base, cand, Clock(spend=0.0), calls)
    import llmbench.ab

    first_pass = llmbench.ab.run_ab

    def second_fails(rev, **kw):
        if calls:
            raise UserError("the baseline side died")
        return first_pass(rev, **kw)

    monkeypatch.setattr("llmbench.ab.run_ab", second_fails)
    wide = confirm_plan.plan(_candidates(base, cand), base, cand, budget_s=100_000)
    cheap, dear = sorted(wide.estimates.values(), key=lambda e: e.seconds)
    dear_first_look = _to_first_look(dear)
    confirmed = confirm.confirm(gate.compare_runs(base, cand), pytest_args=[],
                                budget_s=wide.start_s + max(cheap.seconds + 1, dear_first_look))
    assert len(calls) == 1
    verdicts = {c.name: c for c in confirmed.comparisons}
    assert verdicts[cheap.name].verdict is Verdict.REGRESSION
    assert verdicts[dear.name].verdict is Verdict.NOT_CONFIRMED
    assert confirmed.confirmation["failed"] == {"why": "the baseline side died",
                                                "benchmarks": [dear.name]}
    assert "a further A/B of 1 failed (the baseline side died)" in gate.render_text(confirmed)
    again = stored.apply_recorded(gate.compare_runs(base, cand).comparisons,
                                  confirmed.confirmation)
    assert {c.name: c.verdict for c in again} == {k: c.verdict for k, c in verdicts.items()}
    assert confirmed.exit_code == 1


def test_the_confirmation_re_measures_the_chosen_and_names_the_rest(monkeypatch):
    base, cand = _run(1, A, scale=20), _run(2, B, factors={"decode": 1.5}, scale=20)
    calls = []
    # The A/B spends its whole budget: nothing is left for a further pass.
    _fake_ab(monkeypatch, base, cand, Clock(spend=1.0), calls)
    result = gate.compare_runs(base, cand)
    wide = confirm_plan.plan(_candidates(base, cand), base, cand, budget_s=100_000)
    cheap = min(wide.estimates.values(), key=lambda e: e.seconds)
    budget = wide.start_s + cheap.seconds + 1
    confirmed = confirm.confirm(result, pytest_args=["--model=tiny"], budget_s=budget)
    assert [a for a in calls[0]["pytest_args"] if "::" in a] == [cheap.name]
    verdicts = {c.name: c for c in confirmed.comparisons}
    assert verdicts[cheap.name].verdict is Verdict.REGRESSION
    other = (set(wide.estimates) - {cheap.name}).pop()
    assert verdicts[other].verdict is Verdict.NOT_CONFIRMED
    assert "not re-measured: the confirmation's budget went to" in verdicts[other].reason
    assert confirmed.confirmation["left"] == [other]
    assert ("1 more slower benchmark(s) its budget would not decide are not confirmed"
            in gate.render_text(confirmed))
    assert confirmed.exit_code == 1  # one confirmed regression fails the run


def test_a_stored_regression_the_budget_left_out_is_not_confirmed_here_and_in_compare(
        monkeypatch):
    base, cand = _run(1, A, scale=20), _run(2, B, factors={"decode": 1.5}, scale=20)

    _fake_ab(monkeypatch, base, cand, Clock(spend=1.0), [])
    plain = gate.compare_runs(base, cand)
    # Both slower benchmarks as stored regressions (beyond a measured noise), one budget.
    result = dataclasses.replace(plain, comparisons=tuple(
        dataclasses.replace(c, verdict=Verdict.REGRESSION) if c.name in (CHEAP, DEAR) else c
        for c in plain.comparisons))
    confirmed = confirm.confirm(result, pytest_args=[], budget_s=1)
    [left] = confirmed.confirmation["left"]
    verdicts = {c.name: c for c in confirmed.comparisons}
    assert verdicts[left].verdict is Verdict.NOT_CONFIRMED
    assert "the confirmation's budget left it out" in verdicts[left].reason
    assert confirmed.exit_code == 1  # the one it re-measured was confirmed
    again = stored.apply_recorded(result.comparisons, confirmed.confirmation)
    assert {c.name: c.verdict for c in again} == {k: c.verdict for k, c in verdicts.items()}
