"""Stored comparisons on a shared machine: what two saved runs may conclude.

Seeded synthetic runs for each rule: the same code gives no verdict; the noise between runs
is measured from the environment's runs of one code (pooled, then moderated across
benchmarks); a slowdown beyond the rounds' noise but within the noise between runs, or with
that noise unmeasured, is "not confirmed" (exit 6); a paired A/B (faked here, real in
tests/test_confirm_real.py) settles what the stored runs could not.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math

import numpy as np
import pytest
from gate_runs import QUIET_COMMIT, make_run, quiet_history
from scipy import special
from scipy import stats as scipy_stats

from llmbench import gate
from llmbench.bench import confirm
from llmbench.errors import Exit, UserError
from llmbench.gate import noise, pipeline
from llmbench.gate.confirmation import Status
from llmbench.gate.stats import Verdict
from llmbench.runs import Run, code_differences, run_from_json, same_code

DECODE = {"benchmarks/test_prefill_decode.py::test_decode_steps[ctx=16]",
          "benchmarks/test_prefill_decode.py::test_decode_steps[ctx=128]"}
A, B = "a" * 40, "b" * 40


def _confirm(result, *, pytest_args, budget_s, log=None, **kw):
    """The suite's confirmation of a screened result: the gate's pipeline with the suite's
    paired A/B (`llmbench.ab.run_ab`, replaced by a fake in these tests)."""
    return pipeline.confirm(result, confirm.runner(result.candidate, pytest_args=pytest_args,
                                                   log=log, **kw), budget_s)


def _run(seed: int, commit: str | None = A, *, dirty: bool = False, versions=None,
         injected=None, **kw) -> Run:
    data = make_run(seed, **kw)
    data["commit_info"] = {"id": commit, "dirty": dirty} if commit else {}
    if versions is not None:
        data["llmbench"]["environment"]["versions"].update(versions)
    if injected is not None:
        data["llmbench_injected"] = {"slow_down": injected}
    return run_from_json(data, f"run{seed}")


def _verdicts(result) -> dict[str, Verdict]:
    return {c.name: c.verdict for c in result.comparisons}


def _drifting_history(spread: float, count: int = 6, commit: str = "c" * 40) -> list[Run]:
    """Runs of one commit on a machine whose speed moves by `spread` (log sd) from run to run,
    the same for every benchmark of a run."""
    rng = np.random.default_rng(7)
    return [_run(300 + i, commit, factors={"prefill": f, "decode": f})
            for i, f in enumerate(np.exp(rng.normal(0, spread, count)))]


# --- Rule 1: the same code gives no verdict ------------------------------------------------

def test_same_commit_clean_and_versions_is_no_verdict_exit_0_whatever_the_machine_did():
    result = gate.compare_runs(_run(1), _run(2, factors={"decode": 1.4}))
    assert result.same_code and result.exit_code == Exit.OK
    line = gate.summary_line(result)
    assert line.startswith("SAME CODE: no verdict on the code; every difference is the "
                           "machine's (ratios x")
    assert "kept as an observation of the noise between runs" in line
    assert gate.render_text(result).count("same code") == 4
    data = json.loads(gate.render(result, "json"))
    assert data["same_code"] is True and data["exit_code"] == 0


@pytest.mark.parametrize("change, why", [
    ({"commit": B}, "commit aaaaaaaa -> bbbbbbbb"),
    ({"dirty": True}, "the candidate ran uncommitted changes"),
    ({"versions": {"torch": "2.12.0"}}, "torch"),
    ({"injected": {"decode_step": 0.15}}, "commit aaaaaaaa -> aaaaaaaa+slow decode_step x1.15"),
    ({"commit": None}, "the candidate recorded no commit"),
])
def test_anything_else_is_other_code(change, why):
    candidate = _run(2, **{"commit": A, **change})
    assert not same_code(_run(1), candidate)
    assert any(why in d for d in code_differences(_run(1), candidate)), code_differences(
        _run(1), candidate)
    assert not gate.compare_runs(_run(1), candidate).same_code


def test_two_dirty_runs_of_one_commit_are_not_the_same_code():
    assert not same_code(_run(1, dirty=True), _run(2, dirty=True))


def test_more_work_still_fails_between_runs_of_the_same_code():
    more = make_run(2)
    more["commit_info"] = {"id": A, "dirty": False}
    less = make_run(1)
    less["commit_info"] = {"id": A, "dirty": False}
    for run, flops in ((less, 1000), (more, 2000)):
        for bench in run["benchmarks"]:
            bench["extra_info"]["work"] = {
                "num_ops": 2, "flops": flops, "bytes_read": 500, "bytes_written": 500,
                "graphs_compiled": None, "graph_breaks": None, "ops": {"aten::mm": 2}}
    result = gate.compare_runs(run_from_json(less, "a"), run_from_json(more, "b"))
    assert result.same_code
    assert len(result.work_regressions) == 4  # exact counts: the machine cannot explain them
    assert result.exit_code == Exit.REGRESSION
    assert gate.summary_line(result).startswith("REGRESSION: 4 with more work, although both "
                                                "runs measured the same code")


# --- Rule 2: the noise between runs is measured ---------------------------------------------

def test_pooled_spread_is_the_within_code_standard_deviation():
    sd, df = noise.pooled_spread([[0.0, 0.2], [1.0, 1.1, 1.3], [5.0]])
    # deviations: +-0.1 (ss 0.02); mean 1.1333: ss 0.0467; one value alone adds nothing
    assert df == 3
    assert sd == pytest.approx(math.sqrt((0.02 + 0.046667) / 3), rel=1e-4)
    assert noise.pooled_spread([[1.0], [2.0]]) is None


def test_the_prior_is_the_shared_variance_when_benchmarks_agree():
    s0_2, d0 = noise.fit_prior([0.01] * 8, [3] * 8)
    # Equal variances: the prior is their level, on the log scale's bias-corrected mean.
    expected = 0.01 * math.exp(math.log(1.5) - special.digamma(1.5))
    assert s0_2 == pytest.approx(expected, rel=1e-9) and math.isinf(d0)
    rng = np.random.default_rng(0)
    spread = np.exp(rng.normal(0, 2, 40)) * 0.01  # variances 100x apart: little to share
    _, d0_spread = noise.fit_prior(list(spread), [3] * 40)
    assert d0_spread < 4  # a few degrees of freedom: each keeps most of its own


def test_estimate_uses_only_runs_of_known_repeated_code():
    history = [_run(1), _run(2), _run(3, B), _run(4, None), _run(5, A, dirty=True)]
    estimate = noise.estimate_noise(history)
    assert (estimate.runs, estimate.groups, estimate.observations) == (2, 1, 1)
    assert set(estimate.spreads) == set(history[0].benchmarks)
    assert all(s.own_df == 1 for s in estimate.spreads.values())
    assert noise.estimate_noise([_run(1), _run(3, B)]).spreads == {}


def test_a_drifting_machine_measures_a_wider_spread_than_a_quiet_one():
    quiet = noise.estimate_noise(quiet_history(6))
    drifting = noise.estimate_noise(_drifting_history(0.10))
    key = next(iter(DECODE))
    assert quiet.spreads[key].sigma < 0.03
    assert 0.05 < drifting.spreads[key].sigma < 0.2


def test_one_a_a_pair_is_worth_few_degrees_of_freedom_however_well_benchmarks_agree():
    """A run's drift moves every benchmark at once, so their variances agree and the prior
    alone would claim infinite df from one pair; it is capped at the A/A observations."""
    estimate = noise.estimate_noise([_run(1), _run(2, factors={"prefill": 1.1, "decode": 1.1})])
    assert estimate.observations == 1
    assert all(s.df <= 2 for s in estimate.spreads.values())


def test_runs_that_did_other_work_are_not_pooled_with_the_rest():
    history = [_run(1), _run(2)]
    other = make_run(3)
    other["commit_info"] = {"id": A, "dirty": False}
    for bench in other["benchmarks"]:
        bench["extra_info"]["output_tokens"] = 20
        bench["stats"]["data"] = [x * 2 for x in bench["stats"]["data"]]
    estimate = noise.estimate_noise([*history, run_from_json(other, "other")])
    assert all(s.own_df == 1 for s in estimate.spreads.values())  # the other-work run alone


# --- Rule 3 and 4: not confirmed, and what a stored comparison can tell ---------------------

def test_without_measured_noise_a_slowdown_is_not_confirmed_exit_6():
    result = gate.compare_runs(_run(1), _run(2, B, factors={"decode": 1.4}), history=[_run(1)])
    verdicts = _verdicts(result)
    assert {k for k, v in verdicts.items() if v is Verdict.NOT_CONFIRMED} == DECODE
    assert Verdict.REGRESSION not in verdicts.values()
    assert result.exit_code == Exit.NOT_CONFIRMED
    text = gate.render_text(result)
    assert ("noise between runs: not measured yet (no two saved runs of one code in this "
            "environment)") in text
    assert "`llmbench ab aaaaaaaa` for a paired verdict now" in text
    assert gate.summary_line(result).startswith(
        "NOT CONFIRMED: 0 regression, 0 improvement, 0 unchanged, 2 inconclusive, "
        "2 not confirmed of 4")


def test_within_the_noise_between_runs_is_not_confirmed_beyond_it_a_regression():
    slower = _run(2, B, factors={"decode": 1.4})
    # The baseline's own commit has no other saved run: it is its code's level alone.
    drifting = gate.compare_runs(_run(1, "d" * 40), slower, history=_drifting_history(0.25))
    assert {k for k, v in _verdicts(drifting).items() if v is Verdict.NOT_CONFIRMED} == DECODE
    assert all("within the noise between runs" in c.reason for c in drifting.comparisons
               if c.name in DECODE)
    quiet = gate.compare_runs(_run(1, QUIET_COMMIT), slower, history=quiet_history())
    assert {k for k, v in _verdicts(quiet).items() if v is Verdict.REGRESSION} == DECODE
    assert quiet.exit_code == Exit.REGRESSION


def test_the_smallest_regression_a_stored_comparison_can_call_is_stated():
    # A baseline whose commit has no other saved run: two runs' draws, sigma * sqrt(2).
    result = gate.compare_runs(_run(1, "d" * 40), _run(2, B), history=_drifting_history(0.10))
    line = next(x for x in gate.render_text(result).splitlines()
                if x.startswith("noise between runs"))
    assert line.startswith("noise between runs: from 6 saved runs of 1 code (5 A/A "
                           "observations); a stored comparison calls a regression from x")
    for key, between in result.between.items():
        spread = result.noise.spreads[key]
        q = scipy_stats.t.ppf(0.95, spread.df)  # the rule's 90% interval, one side each
        assert between.smallest_regression == pytest.approx(
            1.10 * math.exp(q * spread.sigma * math.sqrt(2)))


def test_without_measured_noise_nothing_is_called_unchanged_either():
    result = gate.compare_runs(_run(1), _run(2, B))
    assert set(_verdicts(result).values()) == {Verdict.INCONCLUSIVE}
    assert all("not measured yet" in c.reason for c in result.comparisons)


def test_the_same_code_counts_no_verdict_anywhere():
    result = gate.compare_runs(_run(1), _run(2, factors={"decode": 1.4}))
    assert set(_verdicts(result).values()) == {Verdict.INCONCLUSIVE}
    assert result.counts["regression"] == 0
    assert all("is the machine's" in c.reason for c in result.comparisons)


def test_an_external_server_names_no_code():
    data = make_run(2)
    data["commit_info"] = {"id": A, "dirty": False}
    data["llmbench"]["server"] = {"url": "http://127.0.0.1:8091", "api": "openai"}
    external = run_from_json(data, "external")
    assert not same_code(_run(1), external)
    assert "the candidate's server benchmarks measured http://127.0.0.1:8091" in (
        code_differences(_run(1), external))


def test_an_improvement_the_noise_cannot_prove_is_inconclusive_and_fails_nothing():
    result = gate.compare_runs(_run(1), _run(2, B, factors={"decode": 1 / 1.4}))
    assert {_verdicts(result)[k] for k in DECODE} == {Verdict.INCONCLUSIVE}
    assert result.exit_code == Exit.OK


@pytest.mark.parametrize("factor, verdict", [(1 / 1.1, Verdict.NOT_SLOWER),
                                              (1.0, Verdict.INCONCLUSIVE)])
def test_faster_within_the_noise_between_runs_is_not_slower_when_both_intervals_say_so(
        factor, verdict):
    """A host that got faster since the baseline: the rounds call decode faster, the noise
    between runs lets neither "improvement" nor "unchanged" stand, yet both intervals lie
    below 1 + delta, so a slowdown beyond the threshold is ruled out. Not slower: no
    candidate, nothing inconclusive. The same runs without the move stay inconclusive (the
    interval against the noise reaches past +10%)."""
    history = _drifting_history(0.08)
    result = gate.compare_runs(_run(1, "c" * 40), _run(2, B, factors={"decode": factor}),
                               history=history)
    assert {_verdicts(result)[k] for k in DECODE} == {verdict}
    for c in result.comparisons:
        if c.name in DECODE:
            assert (result.between[c.name].ci_high < 1.1) is (verdict is Verdict.NOT_SLOWER)
            assert (c.reason.startswith("not slower beyond +10%")) is (
                verdict is Verdict.NOT_SLOWER)
    assert DECODE.isdisjoint(pipeline.undecided(result)) is (verdict is Verdict.NOT_SLOWER)
    assert result.exit_code == Exit.OK


def test_unchanged_on_rounds_but_noisy_between_runs_is_inconclusive():
    result = gate.compare_runs(_run(1, "c" * 40), _run(2, B), history=_drifting_history(0.25))
    assert set(_verdicts(result).values()) == {Verdict.INCONCLUSIVE}
    # More rounds cannot settle what two runs disagree on: the line points to a paired A/B.
    line = gate.summary_line(result)
    assert "rounds/side" not in line and "`llmbench ab cccccccc` decides" in line


def test_a_significant_move_within_the_threshold_is_said_even_when_not_a_regression():
    """Every benchmark 7% slower against a 10% threshold: not a regression, and the table
    and the summary say each one got significantly slower."""
    result = gate.compare_runs(_run(1, QUIET_COMMIT), _run(2, B, factors={"decode": 1.07,
                                                                          "prefill": 1.07}),
                               history=quiet_history(8))
    assert Verdict.REGRESSION not in _verdicts(result).values()
    text = gate.render_text(result)
    assert text.count("(slower by ") == 4, text
    assert "4 significantly slower, not proven beyond the threshold" in gate.summary_line(result)


def test_the_same_rules_reach_json_and_markdown():
    result = gate.compare_runs(_run(1), _run(2, B, factors={"decode": 1.4}))
    data = json.loads(gate.render(result, "json"))
    assert data["exit_code"] == Exit.NOT_CONFIRMED
    assert data["counts"]["not confirmed"] == 2
    assert data["code"] == ["commit aaaaaaaa -> bbbbbbbb"] and data["noise"]["runs"] == 0
    assert "**not confirmed**" in gate.render(result, "markdown")


# --- Confirmation: a paired A/B settles the stored verdicts ---------------------------------

class FakeAB:
    """Stands for `llmbench.ab.run_ab`: records its call, returns paired verdicts (with
    `ci`, that interval) for the scheduled (slower) benchmarks (no schedule: for all), and
    "unchanged" for those it pairs after them, which the stored runs could not decide."""

    def __init__(self, verdict: Verdict | None = None, error: str | None = None,
                 ci: tuple[float, float] = (1.2, 1.6)):
        self.verdict, self.error, self.ci, self.calls = verdict, error, ci, []

    def __call__(self, rev, **kw):
        self.calls.append((rev, kw))
        if self.error:
            raise UserError(self.error)
        stored = gate.compare_runs(_run(1), _run(2, B, factors={"decode": 1.4}))
        keys = [k for k in kw["pytest_args"] if "::" in k]
        unreserved = getattr(kw.get("schedule"), "unreserved", frozenset())
        scheduled = [k for k in kw.get("schedule") or keys if k not in unreserved] or keys
        paired = tuple(dataclasses.replace(c, verdict=self.verdict, reason="paired", n_pairs=20,
                                           ci_low=self.ci[0], ci_high=self.ci[1])
                       if c.name in scheduled else
                       dataclasses.replace(c, verdict=Verdict.UNCHANGED, reason="paired",
                                           n_pairs=20, ci_low=0.95, ci_high=1.05)
                       for c in stored.comparisons if c.name in keys)
        return dataclasses.replace(stored, comparisons=paired, code=None)


@pytest.fixture
def fake_ab(monkeypatch):
    def install(**kw):
        fake = FakeAB(**kw)
        monkeypatch.setattr("llmbench.ab.run_ab", fake)
        return fake
    return install


def _stored_slowdown():
    return gate.compare_runs(_run(1), _run(2, B, factors={"decode": 1.4}))


PREFILL = {"benchmarks/test_prefill_decode.py::test_prefill[in=32]",
           "benchmarks/test_prefill_decode.py::test_prefill[in=128]"}


def test_a_confirmed_slowdown_is_a_regression_the_slower_benchmarks_scheduled_first(fake_ab):
    """The slower benchmarks have the schedule (and its reservations); the ones the stored
    runs could not decide (prefill, inconclusive) are paired after them."""
    stored = _stored_slowdown()
    assert {c.name for c in stored.comparisons if c.verdict is Verdict.INCONCLUSIVE} == PREFILL
    fake = fake_ab(verdict=Verdict.REGRESSION)
    result = _confirm(stored, pytest_args=["--model=tiny"], budget_s=120)
    (rev, kw), = fake.calls
    assert rev == A and kw["budget_s"] == pytest.approx(120, abs=1)
    schedule = kw["schedule"]
    assert set(schedule) - schedule.unreserved == DECODE and schedule.unreserved == PREFILL
    assert list(schedule)[:2] == [a for a in kw["pytest_args"] if "::" in a][:2]
    assert set(list(schedule)[:2]) == DECODE  # the slower ones first
    assert {a for a in kw["pytest_args"] if "::" in a} == DECODE | PREFILL
    assert kw["pytest_args"][0] == "--model=tiny"
    verdicts = _verdicts(result)
    assert {k for k, v in verdicts.items() if v is Verdict.REGRESSION} == DECODE
    assert {k for k, v in verdicts.items() if v is Verdict.UNCHANGED} == PREFILL
    assert result.exit_code == Exit.REGRESSION
    assert result.confirmation.ran
    assert list(result.confirmation.undecided) == sorted(PREFILL, key=list(verdicts).index)
    text = gate.render_text(result)
    assert "confirmed by a paired A/B against aaaaaaaa: 4 benchmarks" in text
    # The header names how the settled rows were judged, and the rounds' CI is not theirs.
    assert ("4 benchmark(s) settled on pairs of rounds taken in turn (20-20 pairs a benchmark)"
            ": signed-rank test on log-ratios, with the A/B's own intervals") in text
    assert "CI 90.0% (the settled rows: the A/B's)" in text
    assert not any(line.rstrip().endswith(",") for line in text.splitlines())


def test_a_slowdown_the_ab_clears_passes(fake_ab):
    fake_ab(verdict=Verdict.UNCHANGED)
    result = _confirm(_stored_slowdown(), pytest_args=[], budget_s=60)
    assert {_verdicts(result)[k] for k in DECODE} == {Verdict.UNCHANGED}
    assert result.exit_code == Exit.OK
    assert all(c.reason.startswith("paired A/B: ") for c in result.comparisons
               if c.name in DECODE)


def test_a_slowdown_the_ab_cannot_decide_in_its_budget_is_not_confirmed(fake_ab):
    fake_ab(verdict=Verdict.INCONCLUSIVE)
    result = _confirm(_stored_slowdown(), pytest_args=[], budget_s=60)
    assert {_verdicts(result)[k] for k in DECODE} == {Verdict.NOT_CONFIRMED}
    assert result.exit_code == Exit.NOT_CONFIRMED
    assert result.confirmation.ran


def _beyond_the_noise():
    """Stored regressions: slower on the rounds and beyond the measured noise between runs
    (a run disturbed by other work beside it can be, several times over)."""
    beyond = gate.compare_runs(_run(1, QUIET_COMMIT), _run(2, B, factors={"decode": 1.4}),
                               history=quiet_history())
    assert {k for k, v in _verdicts(beyond).items() if v is Verdict.REGRESSION} == DECODE
    return beyond


def test_a_stored_regression_fails_nothing_until_a_paired_ab_confirms_it(fake_ab):
    fake_ab(verdict=Verdict.INCONCLUSIVE)
    undecided = _confirm(_beyond_the_noise(), pytest_args=[], budget_s=60)
    assert {_verdicts(undecided)[k] for k in DECODE} == {Verdict.NOT_CONFIRMED}
    assert undecided.exit_code == Exit.NOT_CONFIRMED
    assert all("not a regression until a paired A/B confirms it (the paired A/B did not "
               "decide it)" in c.reason for c in undecided.comparisons if c.name in DECODE)
    fake_ab(verdict=Verdict.UNCHANGED)
    assert _confirm(_beyond_the_noise(), pytest_args=[], budget_s=60).exit_code == Exit.OK
    fake_ab(verdict=Verdict.REGRESSION)
    assert _confirm(_beyond_the_noise(), pytest_args=[],
                    budget_s=60).exit_code == Exit.REGRESSION


def test_a_stored_regression_no_ab_can_check_is_not_confirmed_unless_confirming_was_declined(
        fake_ab):
    fake = fake_ab(verdict=Verdict.REGRESSION)
    stored_only = _confirm(_beyond_the_noise(), pytest_args=[], budget_s=None)
    assert stored_only.exit_code == Exit.REGRESSION  # --no-confirm: the stored verdicts stand
    dirty = _beyond_the_noise()
    dirty = dataclasses.replace(dirty, baseline=_run(1, QUIET_COMMIT, dirty=True))
    result = _confirm(dirty, pytest_args=[], budget_s=60)
    assert fake.calls == [] and result.exit_code == Exit.NOT_CONFIRMED
    assert all("none could run: the baseline ran uncommitted changes" in c.reason
               for c in result.comparisons if c.name in DECODE)


def test_an_undecided_ab_that_rules_out_a_regression_clears_it(fake_ab):
    """Between unchanged and faster, undecided: its interval, below 1 + delta, still rules
    out the stored runs' claim."""
    fake_ab(verdict=Verdict.INCONCLUSIVE, ci=(0.90, 1.04))
    result = _confirm(_stored_slowdown(), pytest_args=[], budget_s=60)
    assert {_verdicts(result)[k] for k in DECODE} == {Verdict.NOT_SLOWER}
    assert result.exit_code == Exit.OK
    # Every benchmark decided (the undecided prefill ones unchanged): a pass, verified.
    assert gate.summary_line(result).startswith(
        "PASS: 0 regression, 0 improvement, 2 unchanged, 2 not slower, 0 inconclusive of 4")
    assert all("not slower beyond +10% (CI high 1.040)" in c.reason
               for c in result.comparisons if c.name in DECODE)


@pytest.mark.parametrize("baseline, candidate, budget, why", [
    (_run(1, A, dirty=True), B, 60, "the baseline ran uncommitted changes on aaaaaaaa"),
    (_run(1, None), B, 60, "the baseline run recorded no commit"),
    (_run(1), B, None, "--no-confirm"),
    (_run(1, injected={"decode_step": 0.1}), B, 60, "the baseline ran with an injected slowdown"),
    (_run(1, versions={"torch": "2.12.0"}), A, 60,
     "library versions differ (torch 2.12.0 -> 2.13.0+cpu): both sides of an A/B run"),
])
def test_when_no_ab_can_run_it_says_why_and_stays_not_confirmed(fake_ab, baseline, candidate,
                                                                budget, why):
    fake = fake_ab(verdict=Verdict.REGRESSION)
    stored = gate.compare_runs(baseline, _run(2, candidate, factors={"decode": 1.4}))
    result = _confirm(stored, pytest_args=[], budget_s=budget)
    assert fake.calls == []
    assert result.confirmation.status is Status.NOT_RUN and why in result.confirmation.why
    assert result.exit_code == Exit.NOT_CONFIRMED
    assert f"not confirmed by a paired A/B: {why}" in gate.render_text(result)


def test_a_failing_ab_is_one_line_and_leaves_the_verdicts_not_confirmed(fake_ab):
    fake_ab(error="unknown revision 'aaaaaaaa'")
    result = _confirm(_stored_slowdown(), pytest_args=[], budget_s=60)
    assert result.exit_code == Exit.NOT_CONFIRMED
    assert result.confirmation.why == "the paired A/B failed: unknown revision 'aaaaaaaa'"


def test_the_same_code_or_nothing_undecided_runs_no_ab(fake_ab):
    fake = fake_ab(verdict=Verdict.REGRESSION)
    _confirm(gate.compare_runs(_run(1), _run(2, factors={"decode": 2})), pytest_args=[],
             budget_s=60)
    decided = gate.compare_runs(_run(1), _run(2, B))
    decided = dataclasses.replace(decided, comparisons=tuple(
        dataclasses.replace(c, verdict=Verdict.UNCHANGED) for c in decided.comparisons))
    assert _confirm(decided, pytest_args=[], budget_s=60) is decided
    assert fake.calls == []


def test_with_nothing_slower_the_budget_goes_to_what_the_stored_runs_left_undecided(fake_ab):
    """Drift hides a slowdown as readily as it fakes one: every inconclusive benchmark is
    paired, and one the A/B finds slower fails the run; --no-confirm, or an A/B that cannot
    run, leaves them as they were with no line about it."""
    stored = gate.compare_runs(_run(1), _run(2, B))
    undecided = {c.name for c in stored.comparisons if c.verdict is Verdict.INCONCLUSIVE}
    assert undecided and not pipeline.slower(stored)
    fake = fake_ab(verdict=Verdict.REGRESSION)
    log = io.StringIO()
    result = _confirm(stored, pytest_args=[], budget_s=60, log=log)
    (rev, kw), = fake.calls
    assert set(kw["schedule"]) == kw["schedule"].unreserved == undecided
    assert (f"llmbench: confirming {len(undecided)} the stored runs could not decide, on what "
            "is left, by a paired A/B against aaaaaaaa within 60 s") in log.getvalue()
    assert {a for a in kw["pytest_args"] if "::" in a} == undecided
    # Slower in the pairs, where the stored runs saw nothing: a regression, confirmed.
    assert {c.verdict for c in result.comparisons} == {Verdict.REGRESSION}
    assert result.exit_code == Exit.REGRESSION
    assert _confirm(stored, pytest_args=[], budget_s=None) is stored
    gone = gate.compare_runs(_run(1, None), _run(2, B))
    assert _confirm(gone, pytest_args=[], budget_s=60) is gone
    assert len(fake.calls) == 1


def test_an_injected_slowdown_is_injected_on_the_candidate_side_of_the_ab(fake_ab):
    fake = fake_ab(verdict=Verdict.REGRESSION)
    slowed = _run(2, A, injected={"decode_step": 0.5}, factors={"decode": 1.5})
    _confirm(gate.compare_runs(_run(1), slowed), pytest_args=[], budget_s=60)
    (_, kw), = fake.calls
    assert kw["candidate_args"] == ["-p", "llmbench.bench.inject", "--slow-down=decode_step=0.5"]


@pytest.mark.parametrize("ab, budget", [(Verdict.INCONCLUSIVE, 60), (None, None)])
def test_a_saved_confirmation_that_settled_no_stored_regression_keeps_it_unconfirmed(
        fake_ab, ab, budget):
    """Beyond the noise between runs, left undecided by the A/B (or with the A/B declined):
    `llmbench compare` of the saved pair gives what the suite gave."""
    fake_ab(verdict=ab or Verdict.REGRESSION)
    baseline = _run(1, QUIET_COMMIT)
    candidate_json = make_run(2, factors={"decode": 1.4})
    candidate_json["commit_info"] = {"id": B, "dirty": False}
    confirmed = _confirm(
        gate.compare_runs(baseline, run_from_json(candidate_json, "c"), history=quiet_history()),
        pytest_args=[], budget_s=budget)
    candidate_json["llmbench"]["confirmation"] = confirmed.confirmation.to_json()
    again = gate.compare_runs(baseline, run_from_json(candidate_json, "saved"),
                              history=quiet_history())
    assert _verdicts(again) == _verdicts(confirmed)
    assert again.exit_code == confirmed.exit_code == (
        Exit.NOT_CONFIRMED if budget else Exit.REGRESSION)


def test_a_saved_confirmation_gives_compare_the_same_verdicts(fake_ab):
    fake_ab(verdict=Verdict.UNCHANGED)
    baseline = _run(1)
    candidate_json = make_run(2, factors={"decode": 1.4})
    candidate_json["commit_info"] = {"id": B, "dirty": False}
    confirmed = _confirm(gate.compare_runs(baseline, run_from_json(candidate_json, "c")),
                         pytest_args=[], budget_s=60)
    candidate_json["llmbench"]["confirmation"] = confirmed.confirmation.to_json()
    again = gate.compare_runs(baseline, run_from_json(candidate_json, "saved"))
    assert _verdicts(again) == _verdicts(confirmed)
    assert again.exit_code == Exit.OK
    other_baseline = _run(5, "d" * 40)  # another run: the confirmation was not of this pair
    assert gate.compare_runs(other_baseline, run_from_json(candidate_json, "saved")
                             ).exit_code == Exit.NOT_CONFIRMED
