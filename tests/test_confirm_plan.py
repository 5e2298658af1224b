"""Which slower benchmarks the confirmation re-measures: those its budget can decide,
cheapest to decide first (llmbench.gate.confirm_plan), on seeded synthetic runs."""

from __future__ import annotations

import dataclasses
import io
import math

import numpy as np
import pytest
from gate_runs import QUIET_COMMIT, make_run, quiet_history

from llmbench import gate
from llmbench.bench import confirm
from llmbench.errors import UserError
from llmbench.gate import confirm_plan, family, pipeline, sequential, stored
from llmbench.gate.confirmation import Status
from llmbench.gate.sequential import Design
from llmbench.gate.stats import Verdict
from llmbench.runs import run_from_json
from llmbench.runs.model import ROUND_WALL_S

A, B = "a" * 40, "b" * 40
CHEAP = "benchmarks/test_prefill_decode.py::test_decode_steps[ctx=16]"
DEAR = "benchmarks/test_prefill_decode.py::test_decode_steps[ctx=128]"


def _confirm(result, *, pytest_args, budget_s, log=None, **kw):
    """The suite's confirmation of a screened result: the gate's pipeline with the suite's
    paired A/B (`llmbench.ab.run_ab`, replaced by a fake in these tests)."""
    return pipeline.confirm(result, confirm.runner(result.candidate, pytest_args=pytest_args,
                                                   log=log, **kw), budget_s)


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
    far = confirm_plan.expected_pairs(c, bench, bench, design, 2)
    near = confirm_plan.expected_pairs(dataclasses.replace(c, ratio=1.13), bench, bench, design, 2)
    assert confirm_plan.fewest_for_regression(design, 2) <= far < near
    within = confirm_plan.expected_pairs(dataclasses.replace(c, ratio=1.05), bench, bench,
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
    # The one that does not fit alone is decided with the family, on fewer pairs.
    assert tight.chosen == (cheap.name,) and tight.family == (dear.name,)
    assert tight.family_pairs < dear.pairs
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
    assert tight.chosen == (dear.name,) and tight.family == tight.left == (cheap.name,)


def test_compiling_counts_on_both_sides():
    base = _run(1, A)
    plain = confirm_plan.plan(_candidates(base, _run(2, B, factors={"decode": 1.5})), base,
                              _run(2, B, factors={"decode": 1.5}), budget_s=1000)
    cand = _run(2, B, factors={"decode": 1.5}, compile_s=30)
    compiled = confirm_plan.plan(_candidates(base, cand), base, cand, budget_s=1000)
    assert compiled.estimates[DEAR].seconds == pytest.approx(
        plain.estimates[DEAR].seconds + 60)
    assert compiled.chosen[0] == CHEAP


# The stored runs leave prefill inconclusive: the confirmation pairs them after the slower.
PREFILL = ["benchmarks/test_prefill_decode.py::test_prefill[in=32]",
           "benchmarks/test_prefill_decode.py::test_prefill[in=128]"]


def _fake_ab(monkeypatch, base, cand, calls, reach=None):
    """Stands for `run_ab`: the first `reach` benchmarks of its schedule paired and
    confirmed, the rest not reached, as the coordinator leaves them (`test_shares`); with
    `reach` None, every one paired, those it pairs after the schedule unchanged."""
    def fake_ab(rev, **kw):
        calls.append(kw)
        names = [a for a in kw["pytest_args"] if "::" in a]
        schedule = kw["schedule"]
        reached = [name for name in schedule if name not in schedule.unreserved][:reach]
        stored_result = gate.compare_runs(base, cand)
        return dataclasses.replace(stored_result, code=None, comparisons=tuple(
            dataclasses.replace(c, verdict=Verdict.REGRESSION, n_pairs=18, reason="paired")
            if c.name in reached else
            dataclasses.replace(c, verdict=Verdict.UNCHANGED, n_pairs=8, reason="paired")
            if reach is None else
            dataclasses.replace(c, verdict=Verdict.INCONCLUSIVE, reason="unpaired")
            for c in stored_result.comparisons if c.name in names))

    monkeypatch.setattr("llmbench.ab.run_ab", fake_ab)


def test_every_candidate_goes_to_one_ab_in_the_plans_order_with_its_first_look_reserved(
        monkeypatch):
    """Even those the plan expects the budget to leave out: pairs that decide sooner than
    the stored runs predict leave them time, and one A/B starts both sides once."""
    base, cand = _run(1, A, scale=20), _run(2, B, factors={"decode": 1.5}, scale=20)
    wide = confirm_plan.plan(_candidates(base, cand), base, cand, budget_s=100_000)
    cheap, dear = sorted(wide.estimates.values(), key=lambda e: e.seconds)
    budget = wide.start_s + cheap.seconds + 1
    tight = confirm_plan.plan(_candidates(base, cand), base, cand, budget)
    assert tight.left == tight.family == (dear.name,)
    calls = []
    _fake_ab(monkeypatch, base, cand, calls)
    confirmed = _confirm(gate.compare_runs(base, cand), pytest_args=["--model=tiny"],
                         budget_s=budget)
    [kw] = calls
    nodes = [a for a in kw["pytest_args"] if "::" in a]
    assert nodes[:2] == [cheap.name, dear.name] and sorted(nodes[2:]) == sorted(PREFILL)
    schedule = kw["schedule"]
    assert schedule.unreserved == set(PREFILL)
    assert {k: v for k, v in schedule.items() if k not in schedule.unreserved} == {
        cheap.name: pytest.approx(confirm_plan.first_look_s(cheap)),
        dear.name: pytest.approx(confirm_plan.together_s(dear, schedule.family_pairs))}
    # Its share of alpha is one of the four candidates' (the prefill ones count too).
    assert schedule.family == {dear.name}
    assert schedule.family_pairs == family.pairs_for(gate.GateOptions().alpha / 4)
    assert kw["budget_s"] == budget and kw["clearing_alpha"] == gate.GateOptions().alpha
    assert kw["options"].alpha == pytest.approx(gate.GateOptions().alpha)  # 4 of 4
    # The family's member is named only by the family: its pairs here (none recorded) name
    # nothing, whatever the A/B's own verdict on them.
    assert {c.name: c.verdict for c in confirmed.comparisons} == {
        CHEAP: Verdict.REGRESSION, DEAR: Verdict.NOT_CONFIRMED,
        **{name: Verdict.UNCHANGED for name in PREFILL}}
    assert "too few pairs to be judged in it" in {
        c.name: c for c in confirmed.comparisons}[DEAR].reason
    assert confirmed.confirmation.left == ()
    assert "confirmed by a paired A/B against aaaaaaaa: 4 benchmarks in" in gate.render_text(
        confirmed)
    again = stored.settle_by(gate.compare_runs(base, cand).comparisons,
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


def test_a_stored_regression_is_scheduled_first_with_the_pairs_confirming_it_needs():
    base, cand = _run(1, A, scale=20), _run(2, B, factors={"decode": 1.5}, scale=20)
    candidates = _candidates(base, cand)
    wide = confirm_plan.plan(candidates, base, cand, budget_s=100_000, family_size=3)
    cheap, dear = sorted(wide.estimates.values(), key=lambda e: e.seconds)
    assert list(confirm_plan.schedule(wide)) == [cheap.name, dear.name]
    marked = [dataclasses.replace(c, verdict=Verdict.REGRESSION) if c.name == dear.name else c
              for c in candidates]
    first = confirm_plan.plan(marked, base, cand, budget_s=100_000, family_size=3)
    schedule = confirm_plan.schedule(first)
    assert list(schedule) == [dear.name, cheap.name]
    # Confirming a regression at its share of alpha takes more pairs than clearing.
    regression = first.estimates[dear.name]
    assert regression.first_look == confirm_plan.fewest_for_regression(Design(), 3) > 8
    assert schedule[dear.name] == pytest.approx(
        dear.seconds + (regression.first_look - dear.first_look) * dear.pair_s)
    assert schedule[cheap.name] == pytest.approx(confirm_plan.first_look_s(cheap))


def test_an_ab_that_fails_leaves_every_candidate_not_confirmed(monkeypatch):
    base, cand = _run(1, A, scale=20), _run(2, B, factors={"decode": 1.5}, scale=20)

    def fails(rev, **kw):
        raise UserError("the baseline side died")

    monkeypatch.setattr("llmbench.ab.run_ab", fails)
    confirmed = _confirm(gate.compare_runs(base, cand), pytest_args=[], budget_s=240)
    verdicts = {c.name: c for c in confirmed.comparisons}
    assert verdicts[CHEAP].verdict is verdicts[DEAR].verdict is Verdict.NOT_CONFIRMED
    assert confirmed.confirmation.status is Status.NOT_RUN
    assert "the paired A/B failed: the baseline side died" in gate.render_text(confirmed)
    assert confirmed.exit_code == 6


def test_the_confirmation_names_the_candidates_its_ab_did_not_reach(monkeypatch):
    base, cand = _run(1, A, scale=20), _run(2, B, factors={"decode": 1.5}, scale=20)
    calls = []
    _fake_ab(monkeypatch, base, cand, calls, reach=1)
    result = gate.compare_runs(base, cand)
    confirmed = _confirm(result, pytest_args=["--model=tiny"], budget_s=60)
    first, other = [name for name in calls[0]["schedule"]
                    if name not in calls[0]["schedule"].unreserved]
    verdicts = {c.name: c for c in confirmed.comparisons}
    assert verdicts[first].verdict is Verdict.REGRESSION
    assert verdicts[other].verdict is Verdict.NOT_CONFIRMED
    assert "not re-measured: the confirmation's budget went to" in verdicts[other].reason
    assert list(confirmed.confirmation.left) == [other, *PREFILL]
    assert confirmed.confirmation.benchmarks == (first,)
    assert all(verdicts[name].verdict is Verdict.INCONCLUSIVE for name in PREFILL)
    assert "the confirmation's budget went to the slower benchmarks first" in verdicts[
        PREFILL[0]].reason
    assert ("1 more slower benchmark(s) its budget did not reach are not confirmed; 2 the "
            "stored runs could not decide were not reached and stay inconclusive"
            in gate.render_text(confirmed))
    assert confirmed.exit_code == 1  # one confirmed regression fails the run


def test_a_stored_regression_the_budget_left_out_is_not_confirmed_here_and_in_compare(
        monkeypatch):
    base, cand = _run(1, A, scale=20), _run(2, B, factors={"decode": 1.5}, scale=20)

    _fake_ab(monkeypatch, base, cand, [], reach=1)
    plain = gate.compare_runs(base, cand)
    # Both slower benchmarks as stored regressions (beyond a measured noise), one budget.
    result = dataclasses.replace(plain, comparisons=tuple(
        dataclasses.replace(c, verdict=Verdict.REGRESSION) if c.name in (CHEAP, DEAR) else c
        for c in plain.comparisons))
    confirmed = _confirm(result, pytest_args=[], budget_s=1)
    left, *undecided = confirmed.confirmation.left
    assert undecided == PREFILL
    verdicts = {c.name: c for c in confirmed.comparisons}
    assert verdicts[left].verdict is Verdict.NOT_CONFIRMED
    assert "the confirmation's budget left it out" in verdicts[left].reason
    assert confirmed.exit_code == 1  # the one it re-measured was confirmed
    again = stored.settle_by(result.comparisons, confirmed.confirmation)
    assert {c.name: c.verdict for c in again} == {k: c.verdict for k, c in verdicts.items()}


def _family_ab(monkeypatch, base, cand, factor, left_family=False, spread=0.01, seed=7,
               calls=None):
    """Stands for `run_ab`: the one decided alone confirmed on 18 pairs, each family member
    given its pairs, `factor` times slower on the candidate (a seeded spread). With
    `left_family`, each member's pairs pointed at a regression: it left the family after them
    and took 18 more (the A/B's own verdict, on every pair, says regression)."""
    def fake_ab(rev, **kw):
        if calls is not None:
            calls.append(kw)
        schedule = kw["schedule"]
        rng = np.random.default_rng(seed)
        records = []
        pairs = schedule.family_pairs + (18 if left_family else 0)
        for name in schedule.family:
            b = [0.3 * math.exp(rng.normal(0, spread)) for _ in range(pairs)]
            records.append({"name": name, "threshold": 0.10, "baseline": b,
                            "candidate": [x * factor * math.exp(rng.normal(0, spread))
                                          for x in b],
                            "left_family_at": schedule.family_pairs if left_family else 0})
        names = [a for a in kw["pytest_args"] if "::" in a]
        stored_result = gate.compare_runs(base, cand)
        return dataclasses.replace(stored_result, code=None, pairing={"benchmarks": records},
                                   comparisons=tuple(
            dataclasses.replace(c, verdict=Verdict.REGRESSION, n_pairs=18, reason="paired")
            if c.name in schedule.family and left_family else
            dataclasses.replace(c, verdict=Verdict.INCONCLUSIVE, n_pairs=schedule.family_pairs,
                                reason="P_adj=1, not decided")
            if c.name in schedule.family else
            dataclasses.replace(c, verdict=Verdict.REGRESSION, n_pairs=18, reason="paired")
            if c.name not in schedule.unreserved else
            dataclasses.replace(c, verdict=Verdict.INCONCLUSIVE, reason="unpaired")
            for c in stored_result.comparisons if c.name in names))

    monkeypatch.setattr("llmbench.ab.run_ab", fake_ab)


@pytest.mark.parametrize("factor, named", [(1.5, True), (1.0, False)])
def test_the_candidates_decided_together_are_named_by_the_family_and_so_recorded(
        monkeypatch, factor, named):
    base, cand = _run(1, A, scale=20), _run(2, B, factors={"decode": 1.5}, scale=20)
    wide = confirm_plan.plan(_candidates(base, cand), base, cand, budget_s=100_000)
    cheap, dear = sorted(wide.estimates.values(), key=lambda e: e.seconds)
    _family_ab(monkeypatch, base, cand, factor)
    result = gate.compare_runs(base, cand)
    confirmed = _confirm(result, pytest_args=["--model=tiny"],
                         budget_s=wide.start_s + cheap.seconds + 1)
    verdicts = {c.name: c for c in confirmed.comparisons}
    together = confirmed.confirmation.family
    assert together.benchmarks == (dear.name,) and together.alpha == pytest.approx(0.05 / 4)
    assert together.regression == ((dear.name,) if named else ())
    if named:
        assert verdicts[dear.name].verdict is Verdict.REGRESSION
        assert "with its family: a closed test" in verdicts[dear.name].reason
        assert verdicts[dear.name].ratio == pytest.approx(1.5, rel=0.03)
    else:
        assert verdicts[dear.name].verdict is Verdict.NOT_CONFIRMED
        assert "not named with its family" in verdicts[dear.name].reason
    text = gate.render_text(confirmed)
    assert (f"1 slower benchmark(s) decided together ({together.pairs} pairs each, a closed "
            f"test at alpha 0.013): {int(named)} named a regression") in text
    # Read back from the saved run, as compare and history do: the same verdicts.
    again = stored.settle_by(result.comparisons, confirmed.confirmation)
    assert {c.name: c.verdict for c in again} == {c.name: c.verdict for c in
                                                  confirmed.comparisons}


def test_slower_ones_that_fit_only_if_cleared_are_decided_together():
    """Within the noise between runs, each is costed at the first look that clears it; two
    of them fit so, not at the look that names a regression, which a real slowdown needs."""
    base, cand = _run(1, A, scale=20), _run(2, B, factors={"decode": 1.5}, scale=20)
    candidates = _candidates(base, cand)
    wide = confirm_plan.plan(candidates, base, cand, budget_s=100_000)
    cheap, dear = sorted(wide.estimates.values(), key=lambda e: e.seconds)
    look = confirm_plan.fewest_for_regression(Design(), 2)
    assert look > cheap.pairs == dear.pairs  # 12 pairs to name one, 8 to clear it
    budget = (wide.start_s + cheap.seconds + (look - cheap.pairs) * cheap.pair_s
              + confirm_plan.together_s(dear, family.pairs_for(0.05 / 2)) + 1)
    both_alone = wide.start_s + sum(e.seconds + (look - e.pairs) * e.pair_s for e in (cheap, dear))
    assert budget < both_alone
    plan = confirm_plan.plan(candidates, base, cand, budget_s=budget)
    assert plan.chosen == (cheap.name,) and plan.family == (dear.name,) and not plan.left
    assert confirm_plan.plan(candidates, base, cand, budget_s=100_000).family == ()


def _with_improvement(base, cand):
    """The stored comparison with the first prefill benchmark called faster beyond the noise
    between runs, as a host that moved since the baseline makes it."""
    plain = gate.compare_runs(base, cand)
    return dataclasses.replace(plain, comparisons=tuple(
        dataclasses.replace(c, verdict=Verdict.IMPROVEMENT, reason="faster beyond the noise")
        if c.name == PREFILL[0] else c for c in plain.comparisons))


@pytest.mark.parametrize("reach, verdict", [(None, Verdict.UNCHANGED),
                                            (1, Verdict.NOT_SLOWER)])
def test_a_stored_improvement_is_confirmed_by_the_ab_or_only_not_slower(monkeypatch, reach,
                                                                       verdict):
    base, cand = _run(1, A, scale=20), _run(2, B, factors={"decode": 1.5}, scale=20)
    calls = []
    _fake_ab(monkeypatch, base, cand, calls, reach=reach)
    result = _with_improvement(base, cand)
    confirmed = _confirm(result, pytest_args=["--model=tiny"], budget_s=60)
    schedule = calls[0]["schedule"]
    assert PREFILL[0] in schedule.unreserved and PREFILL[0] not in schedule.family
    after = {c.name: c for c in confirmed.comparisons}[PREFILL[0]]
    assert after.verdict is verdict
    if verdict is Verdict.NOT_SLOWER:
        assert "not an improvement until a paired A/B confirms it" in after.reason
    again = stored.settle_by(result.comparisons, confirmed.confirmation)
    assert {c.name: c.verdict for c in again}[PREFILL[0]] is verdict


def test_a_stored_improvement_no_ab_can_reproduce_is_not_slower_unless_declined():
    base, cand = _run(1, A, scale=20), _run(2, B, scale=20)
    cand.commit_info["dirty"] = True  # the candidate side may be dirty; the baseline not
    base.commit_info["dirty"] = True
    result = _with_improvement(base, cand)
    assert not pipeline.slower(result)  # nothing slower
    not_run = _confirm(result, pytest_args=[], budget_s=60)
    assert {c.name: c.verdict for c in not_run.comparisons}[PREFILL[0]] is Verdict.NOT_SLOWER
    assert not_run.confirmation.status is Status.NOT_RUN
    again = stored.settle_by(result.comparisons, not_run.confirmation)
    assert {c.name: c.verdict for c in again}[PREFILL[0]] is Verdict.NOT_SLOWER
    declined = _confirm(result, pytest_args=[], budget_s=None)
    assert {c.name: c.verdict for c in declined.comparisons}[PREFILL[0]] is Verdict.IMPROVEMENT


def test_with_a_family_the_undecided_that_fit_are_still_paired():
    """The stored runs' undecided (prefill here) follow the family, each while it fits; the
    schedule holds every one of them, with nothing reserved."""
    base, cand = _run(1, A, scale=20), _run(2, B, factors={"decode": 1.5}, scale=20)
    stored_result = gate.compare_runs(base, cand)
    candidates = [c for c in stored_result.comparisons
                  if c.verdict in (Verdict.NOT_CONFIRMED, Verdict.INCONCLUSIVE)]
    wide = confirm_plan.plan(candidates, base, cand, budget_s=100_000)
    cheap, dear = sorted((wide.estimates[n] for n in (CHEAP, DEAR)), key=lambda e: e.seconds)
    prefill = sorted((wide.estimates[n] for n in PREFILL), key=lambda e: e.seconds)
    look = confirm_plan.fewest_for_regression(Design(), len(candidates))
    pairs = family.pairs_for(0.05 / len(candidates))
    budget = (wide.start_s + cheap.seconds + (look - cheap.pairs) * cheap.pair_s
              + confirm_plan.together_s(dear, pairs) + prefill[0].seconds + 1)
    plan = confirm_plan.plan(candidates, base, cand, budget_s=budget)
    assert plan.family == (dear.name,)
    assert plan.chosen == (cheap.name, prefill[0].name) and plan.left == (prefill[1].name,)
    schedule = confirm_plan.schedule(plan)
    assert list(schedule) == [cheap.name, dear.name, prefill[0].name, prefill[1].name]


def test_an_undecided_benchmark_shown_slower_is_planned_with_the_slower_ones():
    """Inconclusive on the stored runs but slower beyond their noise (within the threshold):
    ranked by its cost among the slower benchmarks, and reserved like them, where an
    undecided one waits behind every slower one with nothing reserved."""
    base, cand = _run(1, A, scale=20), _run(2, B, factors={"decode": 1.5}, scale=20)
    candidates = [dataclasses.replace(c, verdict=Verdict.INCONCLUSIVE) if c.name == CHEAP
                  else c for c in _candidates(base, cand)]
    waiting = confirm_plan.plan(candidates, base, cand, budget_s=1)
    assert waiting.chosen == (DEAR,) and waiting.undecided == {CHEAP}
    assert list(confirm_plan.schedule(waiting)) == [DEAR, CHEAP]
    shown = confirm_plan.plan(candidates, base, cand, budget_s=1,
                              slower_undecided=frozenset({CHEAP}))
    assert shown.chosen == (CHEAP,) and not shown.undecided
    assert list(confirm_plan.schedule(shown)) == [CHEAP, DEAR]


def test_decode_shown_slower_within_the_threshold_is_paired_before_the_unshown(monkeypatch):
    """A slowdown the drift shrank below the threshold on the stored runs: the decode
    benchmarks, slower beyond the noise between quiet runs, are paired right after the
    stored regressions, with their first looks reserved; the one the A/B does not reach
    stays inconclusive, as the stored runs left it, and fails nothing."""
    base = _run(1, QUIET_COMMIT)
    cand = _run(2, B, factors={"decode": 1.1, "prefill": 1.4})
    result = gate.compare_runs(base, cand, history=quiet_history(8))
    decode = sorted(pipeline.slower_undecided(result))
    assert decode == sorted([CHEAP, DEAR])
    assert {c.name: c.verdict for c in result.comparisons if c.name in decode} == {
        CHEAP: Verdict.INCONCLUSIVE, DEAR: Verdict.INCONCLUSIVE}
    calls, log = [], io.StringIO()
    _fake_ab(monkeypatch, base, cand, calls, reach=3)
    confirmed = _confirm(result, pytest_args=["--model=tiny"], budget_s=60, log=log)
    assert ("confirming 2 of 2 slower benchmark(s) and 2 shown slower within the threshold, "
            "stored regressions first, then cheapest to decide, by a paired A/B"
            in log.getvalue())
    schedule = calls[0]["schedule"]
    assert sorted(list(schedule)[:2]) == sorted(PREFILL)  # the stored regressions first
    assert list(schedule)[2:] == [CHEAP, DEAR] and not schedule.unreserved
    verdicts = {c.name: c.verdict for c in confirmed.comparisons}
    assert verdicts[CHEAP] is Verdict.REGRESSION and verdicts[DEAR] is Verdict.INCONCLUSIVE
    assert confirmed.confirmation.left == (DEAR,)


def test_an_undecided_benchmark_without_measured_noise_is_not_shown_slower():
    """With no runs of one code to measure the noise between runs, no move is beyond it."""
    result = gate.compare_runs(_run(1, QUIET_COMMIT), _run(2, B, factors={"decode": 1.1}))
    assert pipeline.slower_undecided(result) == []


def test_a_member_whose_pairs_pointed_at_a_regression_is_decided_alone(monkeypatch):
    """It left the family after its few pairs (`ab.focus.leaving_look`): it is judged on
    the pairs after them alone, at its share of alpha, and the family, of none left, names
    nothing. A member no slower is not named on its fresh pairs, whatever the A/B said of
    all its pairs."""
    base, cand = _run(1, A, scale=20), _run(2, B, factors={"decode": 1.5}, scale=20)
    wide = confirm_plan.plan(_candidates(base, cand), base, cand, budget_s=100_000)
    cheap, dear = sorted(wide.estimates.values(), key=lambda e: e.seconds)
    _family_ab(monkeypatch, base, cand, 1.5, left_family=True)
    result = gate.compare_runs(base, cand)
    confirmed = _confirm(result, pytest_args=["--model=tiny"],
                         budget_s=wide.start_s + cheap.seconds + 1)
    together = confirmed.confirmation.family
    assert together.decided_alone == (dear.name,)
    assert together.benchmarks == together.regression == ()
    assert type(together).from_json(together.to_json()) == together
    assert together.alpha == 0.0  # no member stayed: no share of alpha is the family's
    after = {c.name: c for c in confirmed.comparisons}[dear.name]
    assert after.verdict is Verdict.REGRESSION
    assert after.n_pairs == 18 and after.ratio == pytest.approx(1.5, rel=0.03)
    assert "decided alone on the pairs after the" in after.reason
    assert ("; 1 slower benchmark(s) left the family after its pairs to be decided alone"
            in gate.render_text(confirmed))
    again = stored.settle_by(result.comparisons, confirmed.confirmation)
    assert {c.name: c.verdict for c in again} == {c.name: c.verdict for c in
                                                  confirmed.comparisons}


def test_a_member_that_left_is_judged_on_its_fresh_pairs_only(monkeypatch):
    """The A/B's own verdict counts every pair, those that chose it included; the gate's
    does not: the same speed on the fresh pairs is no regression."""
    base, cand = _run(1, A, scale=20), _run(2, B, factors={"decode": 1.5}, scale=20)
    wide = confirm_plan.plan(_candidates(base, cand), base, cand, budget_s=100_000)
    cheap, dear = sorted(wide.estimates.values(), key=lambda e: e.seconds)
    _family_ab(monkeypatch, base, cand, 1.0, left_family=True)
    confirmed = _confirm(gate.compare_runs(base, cand), pytest_args=["--model=tiny"],
                         budget_s=wide.start_s + cheap.seconds + 1)
    after = {c.name: c for c in confirmed.comparisons}[dear.name]
    assert after.verdict is not Verdict.REGRESSION


def test_a_member_that_left_is_judged_as_the_ab_stops_one_decided_alone(monkeypatch):
    """Its fresh pairs, 15% slower and noisy, over many seeds: the gate calls a
    regression exactly where the coordinator's own rule for a benchmark decided alone stops
    on one (`sequential.stop_decision`: its alpha, split over the benchmarks it pairs)."""
    base, cand = _run(1, A, scale=20), _run(2, B, factors={"decode": 1.5}, scale=20)
    wide = confirm_plan.plan(_candidates(base, cand), base, cand, budget_s=100_000)
    cheap, dear = sorted(wide.estimates.values(), key=lambda e: e.seconds)
    outcomes = set()
    for seed in range(12):
        calls = []
        _family_ab(monkeypatch, base, cand, 1.15, left_family=True, spread=0.05, seed=seed,
                   calls=calls)
        confirmed = _confirm(gate.compare_runs(base, cand), pytest_args=["--model=tiny"],
                             budget_s=wide.start_s + cheap.seconds + 1)
        [kw] = calls
        assert kw["schedule"].family == {dear.name}
        rng = np.random.default_rng(seed)  # the fake's pairs, drawn again
        pairs = kw["schedule"].family_pairs + 18
        b = [0.3 * math.exp(rng.normal(0, 0.05)) for _ in range(pairs)]
        c = [x * 1.15 * math.exp(rng.normal(0, 0.05)) for x in b]
        at = kw["schedule"].family_pairs
        stop = sequential.stop_decision(sequential.log_ratios(b[at:], c[at:]),
                                        sequential.Design(alpha=kw["options"].alpha), 0.10,
                                        len(kw["schedule"]))
        after = {x.name: x for x in confirmed.comparisons}[dear.name]
        assert (after.verdict is Verdict.REGRESSION) is (stop is Verdict.REGRESSION), seed
        outcomes.add(after.verdict)
    assert Verdict.REGRESSION in outcomes and len(outcomes) > 1  # the seeds straddle it


def test_a_round_whose_figure_is_not_its_duration_is_costed_by_its_wall_time():
    # The server's capacity case records seconds per request as its round's time; each
    # round is a whole search on the wall clock, which is what its pairs cost.
    plain_base, plain_cand = _run(1, A), _run(2, B, factors={"decode": 1.5})
    plain = confirm_plan.plan(_candidates(plain_base, plain_cand), plain_base, plain_cand,
                              budget_s=100_000)
    searched = []
    for seed, commit, factors in ((1, A, None), (2, B, {"decode": 1.5})):
        data = make_run(seed, factors=factors)
        data["commit_info"] = {"id": commit, "dirty": False}
        data["llmbench"].update(load_s=2.0, warmup_s=2.0)
        next(b for b in data["benchmarks"] if b["fullname"] == DEAR)["extra_info"][
            ROUND_WALL_S] = 40.0
        searched.append(run_from_json(data, f"searched{seed}"))
    base, cand = searched
    assert base.benchmarks[DEAR].round_wall_s == 40.0
    assert base.benchmarks[CHEAP].round_wall_s == base.benchmarks[CHEAP].median_s
    costed = confirm_plan.plan(_candidates(base, cand), base, cand, budget_s=100_000)
    assert costed.estimates[DEAR].pair_s == pytest.approx(2 * 40.0 * confirm_plan.PAIR_OVERHEAD)
    assert costed.estimates[DEAR].pair_s > 100 * plain.estimates[DEAR].pair_s
    assert costed.estimates[CHEAP] == plain.estimates[CHEAP]
