"""Slower candidates decided together (`llmbench.gate.family`): a closed test over the family,
a few pairs each, on seeded log-ratios; then the coordinator giving each member its pairs
(scripted workers on a fake clock, `test_focus`), and the confirmation naming them."""

from __future__ import annotations

import io
import math

import numpy as np
import pairing_clock
import pytest
from scipy import stats as scipy_stats
from test_clearing import DESIGN
from test_focus import Scripted
from test_shares import Quiet

from llmbench.ab import focus, pairing, shares
from llmbench.gate import family, sequential

THRESHOLD = 0.10
SPREAD = 0.015  # a pair's log-ratio on a quiet machine


def _family(ratios: dict[str, float], n: int, seed: int = 0, spread: float = SPREAD):
    rng = np.random.default_rng(seed)
    return {name: math.log(r) + rng.normal(0, spread, n) for name, r in ratios.items()}


def _thresholds(d):
    return {name: THRESHOLD for name in d}


@pytest.mark.parametrize("level, pairs", [(0.05, 6), (0.05 * 16 / 32, 7), (0.05 / 32, 11),
                                          (0.5, family.MIN_PAIRS)])
def test_each_member_takes_the_fewest_pairs_that_name_it_alone_with_one_pair_short(
        level, pairs):
    assert family.pairs_for(level) == pairs
    # Every pair past the threshold but the one nearest it (the smallest): alone, it is
    # named at this level on these pairs, and not on one pair fewer.
    ratios = [1.099] + [1.3] * (pairs - 1)
    one = {"a": np.log(ratios) + np.arange(pairs) * 1e-4}
    assert family.decide(one, _thresholds(one), level, pairs)["a"].regression
    if pairs > family.MIN_PAIRS:
        fewer = {"a": np.delete(one["a"], 1)}
        assert not family.decide(fewer, _thresholds(fewer), level, pairs - 1)["a"].regression


def test_a_level_outside_zero_and_one_is_refused():
    with pytest.raises(ValueError, match="family level"):
        family.pairs_for(0.0)


def test_a_family_of_one_is_the_one_sided_signed_rank_test_against_the_threshold():
    d = _family({"a": 1.12}, 9, seed=3, spread=0.03)
    member = family.decide(d, _thresholds(d), 0.05, 9)["a"]
    expected = scipy_stats.wilcoxon(d["a"] - math.log1p(THRESHOLD), alternative="greater",
                                    method="exact").pvalue
    assert member.p_adjusted == pytest.approx(expected)


def test_a_slowdown_shared_by_two_dozen_benchmarks_is_named_in_each_on_five_pairs():
    d = _family({f"decode_{i}": 1.15 for i in range(24)}, family.MIN_PAIRS)
    members = family.decide(d, _thresholds(d), 0.05 * 24 / 32, family.MIN_PAIRS)
    assert all(m.regression for m in members.values())
    assert all(1.12 < m.ratio < 1.18 and m.ci_low > 1.10 for m in members.values())
    # Alone, at its share of alpha and the sequential design's looks, each needs 18 pairs.
    alone = [math.log(1.15)] * 12
    assert sequential.stop_decision(alone, DESIGN, THRESHOLD, 32) is None


def test_the_same_speed_is_never_named():
    d = _family({f"b_{i}": 1.0 for i in range(24)}, family.MIN_PAIRS)
    assert not any(m.regression for m in family.decide(d, _thresholds(d), 0.05, 5).values())


def test_a_member_not_past_the_threshold_is_never_named_for_its_neighbours():
    """It dilutes every subset that holds it: the family may then name fewer, never it."""
    for seed in range(20):
        d = _family({**{f"decode_{i}": 1.3 for i in range(12)}, "prefill": 1.0}, 6, seed)
        members = family.decide(d, _thresholds(d), 0.05, 6)
        assert not members["prefill"].regression
        assert members["prefill"].p_adjusted > members["decode_0"].p_adjusted


def test_named_wrongly_at_most_at_the_level_with_every_member_on_its_threshold():
    """The worst case of the null: every member exactly at 1 + delta. Over seeds, the share
    of families in which any member is named stays within the level (closed testing)."""
    level, trials, named = 0.05, 400, 0
    for seed in range(trials):
        d = _family({f"m_{i}": 1 + THRESHOLD for i in range(8)}, 6, seed, spread=0.02)
        named += any(m.regression for m in family.decide(d, _thresholds(d), level, 6).values())
    # A binomial bound: at the level, 400 trials exceed 32 with probability < 0.001.
    assert named <= 32


def test_a_member_with_fewer_pairs_is_left_out_and_later_pairs_are_not_judged():
    d = _family({"short": 1.3, "long": 1.3}, 5)
    d["short"] = d["short"][:4]
    d["long"] = np.append(d["long"], [math.log(0.5)] * 10)  # past its n: not judged
    members = family.decide(d, _thresholds(d), 0.05, 5)
    assert set(members) == {"long"} and members["long"].regression


# The coordinator: one benchmark decided alone, whose pairs point at a regression (it may take
# the rest of the budget), then six members of the family, each with its five pairs kept.
MEMBERS = [f"member_{i}" for i in range(6)]
PAIR_S = 2 * Quiet.ROUND_S


def _schedule(pairs=family.MIN_PAIRS):
    return shares.Schedule({"alone": 12 * PAIR_S, **{m: pairs * PAIR_S for m in MEMBERS}},
                           family=frozenset(MEMBERS), family_pairs=pairs)


def test_the_members_take_their_pairs_which_a_focused_benchmark_leaves_them(clock,
                                                                             monkeypatch):
    """The one decided alone is just past the threshold in noisy pairs: focusing, it would
    take the rest of the budget (27 pairs) and leave three members none. The members keep
    their five pairs each, and the family names every one. (None leaves the family here:
    one that does takes what the later members would get, as the next test shows.)"""
    monkeypatch.setattr(pairing, "leaving_look", lambda *args: None)
    ratios = {"alone": 1.16, **{m: 1.6 for m in MEMBERS}}
    scripted = Scripted(clock, ratios, budget_s=45, focused=True, clearing=DESIGN,
                        schedule=_schedule(), seed=0)
    records = scripted.judge()
    assert records["alone"].focused_at and records["alone"].stopped == "budget"
    assert all(records[m].stopped == "family" for m in MEMBERS)
    timed = {side: scripted.workers[side].timed for side in ("baseline", "candidate")}
    assert all(len(timed["candidate"][m]) == family.MIN_PAIRS for m in MEMBERS)
    assert clock.now <= 1000 + 45
    d = {m: sequential.log_ratios(timed["baseline"][m], timed["candidate"][m]) for m in MEMBERS}
    members = family.decide(d, _thresholds(d), 0.05 * 6 / 7, family.MIN_PAIRS)
    assert all(m.regression for m in members.values())


def test_a_member_of_the_same_speed_goes_on_to_the_look_that_clears_it(clock):
    ratios = {"alone": 1.3, **{m: 1.0 for m in MEMBERS}}
    records = Quiet(clock, ratios, budget_s=200, focused=True, clearing=DESIGN,
                    schedule=_schedule()).judge()
    assert all(records[m].stopped == "cleared" for m in MEMBERS)


def test_a_member_whose_pairs_cannot_fit_stops_and_is_left_to_the_budget(clock):
    ratios = {m: 1.3 for m in MEMBERS[:2]}
    schedule = shares.Schedule({m: 2 * PAIR_S for m in MEMBERS[:2]},
                               family=frozenset(MEMBERS[:2]), family_pairs=5)
    records = Quiet(clock, ratios, budget_s=2.5 * PAIR_S, focused=True, clearing=DESIGN,
                    schedule=schedule).judge()
    assert records[MEMBERS[0]].stopped == "budget"


def test_a_benchmark_decided_alone_leaves_the_members_their_pairs_before_later_ones():
    schedule = shares.Schedule({"first": 10.0, "later": 20.0, "m1": 5.0, "m2": 5.0},
                               family=frozenset({"m1", "m2"}), family_pairs=5)
    # 30 s left: the first's own 10, both members' 10; the later one (20) no longer fits.
    assert shares.reserved_share("first", 30.0, schedule) == pytest.approx(20.0)
    assert shares.reserved_for_family("first", 30.0, schedule, {"first"}) == pytest.approx(10.0)
    assert shares.reserved_for_family("first", 30.0, schedule, {"first", "m1"}) == 5.0


def test_a_benchmark_is_not_focused_when_its_deciding_look_fits_only_in_the_family_time(clock):
    """With six pairs kept for each member, what the members leave cannot hold the look that
    should decide the one alone, though the whole budget could: it is never told it may take
    the rest (it would stop at once, its next look not fitting), and it keeps to its share."""
    ratios = {"alone": 1.16, **{m: 1.6 for m in MEMBERS}}
    scripted = Scripted(clock, ratios, budget_s=45, focused=True, clearing=DESIGN,
                        schedule=_schedule(pairs=6), seed=0)
    scripted.progress.stream = io.StringIO()
    records = scripted.judge()
    assert not records["alone"].focused_at and records["alone"].stopped == "budget"
    assert "alone: slower in its pairs" not in scripted.progress.stream.getvalue()


def test_a_member_that_leaves_takes_what_the_later_members_would_get(clock):
    """The same run, members free to leave: the first member's pairs point far past the
    threshold, it leaves and is named alone on fresh pairs, and the last members are not
    reached (one regression named already fails the run)."""
    ratios = {"alone": 1.16, **{m: 1.6 for m in MEMBERS}}
    records = Scripted(clock, ratios, budget_s=45, focused=True, clearing=DESIGN,
                       schedule=_schedule(), seed=0).judge()
    assert records[MEMBERS[0]].left_family_at == family.MIN_PAIRS
    assert records[MEMBERS[0]].stopped == "regression"
    assert records[MEMBERS[-1]].stopped == "not reached"


def test_a_member_whose_pairs_point_at_a_regression_leaves_to_be_decided_alone(clock):
    """15% slower against a 10% threshold: a closed test over five pairs a member cannot
    name it. The first member leaves the family after its pairs and is decided alone, on
    the pairs that name it; the later members get what it leaves."""
    ratios = {m: 1.15 for m in MEMBERS}
    scripted = Quiet(clock, ratios, budget_s=200, focused=True, clearing=DESIGN,
                     schedule=shares.Schedule({m: 5 * PAIR_S for m in MEMBERS},
                                              family=frozenset(MEMBERS), family_pairs=5))
    scripted.progress.stream = io.StringIO()
    records = scripted.judge()
    first = records[MEMBERS[0]]
    assert first.left_family_at == 5 and first.stopped == "regression"
    # Decided on the pairs after the five that chose it: at a look of those.
    pairs = len(scripted.workers["candidate"].timed[MEMBERS[0]])
    assert pairs - 5 in DESIGN.looks
    assert first.to_json(scripted.workers)["left_family_at"] == 5
    assert "leaves the family to be decided alone" in scripted.progress.stream.getvalue()
    assert all(len(scripted.workers["candidate"].timed[m]) >= 5 for m in MEMBERS)


def test_a_member_stays_when_its_pairs_do_not_point_past_the_threshold(clock):
    ratios = {m: 1.05 for m in MEMBERS}
    records = Quiet(clock, ratios, budget_s=200, focused=True, clearing=DESIGN,
                    schedule=_schedule()).judge()
    assert not any(r.left_family_at for r in records.values())


@pytest.mark.parametrize("ratio, pairs, left_s, look", [
    (1.3, 7, 1e6, 18),      # far past the threshold, time enough: the first look that can
    (1.3, 5, 1e6, 18),      # name one of 20; on the fewest pairs a family takes too
    (1.05, 7, 1e6, None),   # slower, but within the threshold
    (1.3, 7, 17.0, None),   # the 18 fresh pairs that can name one of 20 do not fit
    (1.3, 7, 18.0, 18),
])
def test_leaving_look_asks_its_pairs_and_the_time_left(ratio, pairs, left_s, look):
    d = _family({"m": ratio}, pairs)["m"]
    assert sequential.fewest_for_regression(sequential.Design(), 20) == 18
    assert focus.leaving_look(d, sequential.Design(), THRESHOLD, benchmarks=20,
                              per_pair_s=1.0, left_s=left_s) == look


# A confirmation like the quick profile's: twelve same-speed candidates decided alone, then
# a family of five whose first member is 20% slower, in pairs noisier than a quiet
# machine's (a decode benchmark's).
OTHERS = [f"other_{i}" for i in range(12)]
FAMILY = ["slower", *MEMBERS[1:5]]


class Noisy(Scripted):
    NOISE = 0.08


class Reestimated(Noisy):
    """The earlier rule: a member that left is re-estimated from its first fresh look on,
    and goes back to its share (spent) when those pairs alone do not point at a regression
    decided in the time left."""

    def _member_stop(self, record, d, left_s, per_pair):
        stopped = super()._member_stop(record, d, left_s, per_pair)
        record.left_for_look = 0
        return stopped


def _leaver(clock, kind=Noisy, ratio=1.2, seed=3):
    ratios = {**{o: 1.0 for o in OTHERS}, "slower": ratio, **{m: 1.0 for m in FAMILY[1:]}}
    schedule = shares.Schedule({**{o: 8 * PAIR_S for o in OTHERS},
                                **{m: 6 * PAIR_S for m in FAMILY}},
                               family=frozenset(FAMILY), family_pairs=6)
    scripted = kind(clock, ratios, budget_s=120, focused=True, clearing=DESIGN,
                    schedule=schedule, seed=seed)
    scripted.progress.stream = io.StringIO()
    return scripted, scripted.judge()["slower"]


def test_a_member_that_left_goes_on_to_the_look_chosen_when_it_left(clock):
    """Its first eight fresh pairs alone no longer point at a regression decided in the
    time left (re-estimated from them, it would stop there with its share spent); it goes
    on to the look chosen from the pairs that chose it, the first that can name one of
    seventeen, and is named there."""
    scripted, slower = _leaver(clock)
    assert slower.left_family_at == 6 and slower.left_for_look == 18
    assert slower.stopped == "regression"
    assert len(scripted.workers["candidate"].timed["slower"]) - 6 in DESIGN.looks
    assert "decided alone on up to 18 fresh pairs" in scripted.progress.stream.getvalue()
    saved = {b["name"]: b for b in scripted.to_json()["benchmarks"]}
    assert saved["slower"]["left_for_look"] == 18


def test_the_earlier_rule_stopped_that_member_at_its_first_fresh_look(clock):
    scripted, slower = _leaver(clock, kind=Reestimated)
    assert slower.left_family_at == 6 and slower.stopped == "budget"
    assert len(scripted.workers["candidate"].timed["slower"]) == 6 + DESIGN.looks[0]


def test_over_many_seeds_a_member_that_left_is_named_more_often(monkeypatch):
    named = {Noisy: 0, Reestimated: 0}
    for seed in range(120):
        for kind in named:
            _, slower = _leaver(pairing_clock.install(monkeypatch), kind, seed=seed)
            named[kind] += slower.stopped == "regression"
    assert named[Noisy] >= named[Reestimated] + 9, named


def test_members_that_leave_on_the_threshold_are_not_named_beyond_their_alpha(monkeypatch):
    """The null's worst case: the member exactly 10% slower, so its family's pairs often
    send it out, and it may then take fresh pairs up to the look chosen. Its share of
    alpha is 0.05 / 17: over the seeds where it leaves, as many named as it is must have a
    chance above 0.001 at that rate."""
    left = named = 0
    for seed in range(400):
        _, slower = _leaver(pairing_clock.install(monkeypatch), ratio=1.1, seed=seed)
        left += bool(slower.left_family_at)
        named += slower.stopped == "regression"
    assert left >= 40, left
    assert scipy_stats.binom.sf(named - 1, left, 0.05 / 17) > 0.001, (left, named)
