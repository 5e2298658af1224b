"""A confirmation's schedule (`llmbench.ab.shares`): every candidate in one A/B, in the plan's
order, each with its first deciding look reserved.

The coordinator tests drive the scripted workers of `test_focus` on a fake clock: what is
asserted is what was decided and where the budget went, never a timing.
"""

from __future__ import annotations

import pytest
from test_clearing import DECIDED, DESIGN
from test_focus import Scripted

from llmbench.ab import shares

# Eight pairs clear a same-speed candidate at the first look (`sequential`, Clearing).
FIRST_LOOK = 8


class Quiet(Scripted):
    NOISE = 0.03  # rounds as on a quiet machine: pairs of the same speed clear at 8


def test_what_is_left_goes_to_the_benchmark_less_the_later_ones_reservations():
    schedule = {"a": 8.0, "b": 10.0, "c": 30.0}
    assert shares.reserved_share("a", 100.0, schedule) == pytest.approx(60.0)
    assert shares.reserved_share("c", 30.0, schedule) == pytest.approx(30.0)
    # A later one that does not fit beside it is not reserved for; a cheaper one still is.
    assert shares.reserved_share("a", 25.0, schedule) == pytest.approx(15.0)
    assert shares.reserved_share("c", 29.0, schedule) is None  # its own first look
    assert shares.reserved_share("elsewhere", 5.0, schedule) == pytest.approx(5.0)


def test_the_shared_benchmarks_run_in_the_schedules_order():
    common = ["p", "q", "r", "s"]
    assert shares.scheduled(common, {"r": 1.0, "p": 2.0}) == ["r", "p", "q", "s"]
    assert shares.equal_share(90.0, 3) == pytest.approx(30.0)
    assert shares.equal_share(-1.0, 3) == 0.0


# Same-speed candidates: four cheap ones (1 s a pair) and one dear one (8 s a pair) that the
# suite runs first. 110 s holds every first look (4 x 8 + 64 = 96 s), not an equal share of
# it for the dear one (22 s, where it needs 64).
SAME = {"dear": 1.0, **{f"cheap_{i}": 1.0 for i in range(4)}}
ROUND_S = {"dear": 4.0}
BUDGET_S = 110


def _schedule():
    return {**{f"cheap_{i}": FIRST_LOOK * 1.0 for i in range(4)}, "dear": FIRST_LOOK * 8.0}


def test_equal_shares_leave_the_dear_candidate_undecided(clock):
    records = Quiet(clock, SAME, BUDGET_S, focused=True, clearing=DESIGN,
                       round_s=ROUND_S).judge()
    assert records["dear"].stopped == "budget"
    assert all(records[n].stopped in DECIDED for n in SAME if n != "dear")


def test_on_the_schedule_every_candidate_is_decided_in_the_same_budget(clock):
    scripted = Quiet(clock, SAME, BUDGET_S, focused=True, clearing=DESIGN,
                        round_s=ROUND_S, schedule=_schedule())
    records = scripted.judge()
    assert list(records) == [*_schedule()]  # the plan's order, not the suite's
    assert all(r.stopped in DECIDED for r in records.values())
    assert clock.now <= 1000 + BUDGET_S


def test_a_candidate_whose_first_look_no_longer_fits_is_skipped_and_a_cheaper_one_runs(
        clock):
    schedule = {"cheap_0": 8.0, "dear": 64.0, "cheap_1": 8.0}
    ratios = {name: 1.0 for name in schedule}
    scripted = Quiet(clock, ratios, 30, focused=True, clearing=DESIGN, round_s=ROUND_S,
                        schedule=schedule)
    records = scripted.judge()
    assert records["dear"].stopped == "not reached"
    assert records["cheap_0"].stopped in DECIDED and records["cheap_1"].stopped in DECIDED
    assert "dear" not in scripted.workers["candidate"].timed
    assert ("candidate", "skip") in scripted.replies


def test_the_first_candidate_is_tried_even_when_the_budget_cannot_hold_its_first_look(clock):
    scripted = Quiet(clock, {"dear": 1.0}, 10, focused=True, clearing=DESIGN,
                        round_s=ROUND_S, schedule={"dear": 64.0})
    records = scripted.judge()
    assert records["dear"].stopped == "budget"
    assert scripted.workers["candidate"].timed["dear"]


def test_benchmarks_the_schedule_does_not_name_share_what_it_leaves_equally():
    schedule = {"a": 8.0, "b": 10.0}
    assert shares.share_at_turn("open", 90.0, 3, schedule) == pytest.approx(30.0)
    assert shares.share_at_turn("a", 100.0, 4, schedule) == pytest.approx(90.0)  # none for them


def test_nothing_is_reserved_for_an_unreserved_one_and_it_may_take_its_first_look():
    schedule = shares.Schedule({"a": 8.0, "open": 10.0}, frozenset({"open"}))
    assert shares.reserved_share("a", 100.0, schedule) == pytest.approx(100.0)
    assert shares.reserved_share("open", 100.0, schedule) == pytest.approx(
        10.0 * shares.UNRESERVED_MARGIN)
    assert shares.reserved_share("open", 12.0, schedule) == pytest.approx(12.0)
    assert shares.reserved_share("open", 9.0, schedule) is None


def test_the_undecided_follow_the_slower_on_their_first_looks_not_equal_slivers(clock):
    """Twelve undecided same-speed benchmarks after two slower ones, with room for the
    slower ones and five first looks more. On equal shares the first undecided ones start
    on slivers and stop undecided, their pairs spent for nothing (on the real suite each
    start costs both sides a benchmark's setup too); on their first looks every one that
    starts is decided and the rest are skipped."""
    undecided = {f"open_{i}": FIRST_LOOK * 1.0 for i in range(12)}
    schedule = {"cheap_0": FIRST_LOOK * 1.0, "cheap_1": FIRST_LOOK * 1.0, **undecided}
    ratios = {name: 1.0 for name in schedule}
    budget = 2 * 9 + 5 * 9 + 4
    # Equal shares: the undecided ones unscheduled, after the two slower ones.
    sliced = Quiet(clock, ratios, budget, focused=True, clearing=DESIGN,
                   schedule={"cheap_0": FIRST_LOOK * 1.0, "cheap_1": FIRST_LOOK * 1.0}).judge()
    kept = Quiet(clock, ratios, budget, focused=True, clearing=DESIGN,
                 schedule=shares.Schedule(schedule, frozenset(undecided))).judge()
    for records in (sliced, kept):
        assert records["cheap_0"].stopped in DECIDED and records["cheap_1"].stopped in DECIDED
    assert sum(sliced[n].stopped == "budget" for n in undecided) >= 3
    assert not any(kept[n].stopped == "budget" for n in undecided)
    assert sum(kept[n].stopped in DECIDED for n in undecided) >= 4
    assert list(kept) == list(schedule)
