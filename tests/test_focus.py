"""Focusing a confirmation's paired A/B: a benchmark whose pairs point at a regression may take
the rest of the budget, where equal shares would leave every candidate undecided.

The coordinator is driven by scripted workers on a fake clock: each round takes a fixed
time, the candidate's rounds are a seeded lognormal draw around a true ratio, so what is
asserted is where the budget went and what was decided, never a timing.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pairing_clock
import pytest

from llmbench.ab import focus, pairing, shares
from llmbench.gate import sequential

DESIGN = sequential.Design()
THRESHOLD = 0.10


def _estimate(ratio: float, spread: float, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return sequential.estimate(np.log(ratio) + rng.normal(0, spread, n), DESIGN)


@pytest.mark.parametrize("ratio, spread, n, takes", [
    (1.25, 0.05, 18, True),    # well past the threshold: a look or two should decide it
    (1.15, 0.08, 27, True),    # just past it: slower already, beyond it within 120 pairs
    (1.08, 0.05, 27, False),   # slower, but centred within the threshold
    (1.00, 0.08, 27, False),   # the same speed
    (0.85, 0.05, 18, False),   # faster
    (1.12, 0.40, 12, False),   # so noisy that its interval still spans 1
])
def test_only_a_benchmark_whose_pairs_point_at_a_regression_takes_the_rest(
        ratio, spread, n, takes):
    est = _estimate(ratio, spread, n)
    assert focus.takes_the_rest(est, DESIGN, THRESHOLD, per_pair_s=1.0, left_s=1e6) is takes


def test_it_takes_the_rest_only_while_the_deciding_look_fits():
    est = _estimate(1.15, 0.08, 27)
    look = focus.deciding_look(est, DESIGN, THRESHOLD)
    assert look is not None and look > est.n and look in DESIGN.looks
    fits = (look - est.n) * 1.0
    assert focus.takes_the_rest(est, DESIGN, THRESHOLD, per_pair_s=1.0, left_s=fits)
    assert not focus.takes_the_rest(est, DESIGN, THRESHOLD, per_pair_s=1.0, left_s=fits - 1)
    assert not focus.takes_the_rest(None, DESIGN, THRESHOLD, per_pair_s=1.0, left_s=1e6)


def test_no_look_of_the_design_reaches_it_then_none_does():
    # Just past the threshold and noisy: about 200 pairs should decide it.
    est = sequential.PairedEstimate(n=18, centre=math.log(1.12), scale=0.1, p_value=1e-3,
                                    ci_low=1.01, ci_high=1.25)
    assert focus.deciding_look(est, sequential.Design(max_pairs=120), THRESHOLD) is None
    assert not focus.takes_the_rest(est, sequential.Design(max_pairs=120), THRESHOLD,
                                    per_pair_s=0.01, left_s=1e6)
    longer = sequential.Design(max_pairs=400)
    assert focus.deciding_look(est, longer, THRESHOLD) in longer.looks[-3:]


class Scripted(pairing.Coordinator):
    """Workers that answer every turn at once: each round takes ROUND_S on the fake clock;
    the candidate's rounds are the true ratio times a seeded lognormal noise."""

    ROUND_S = 0.5
    NOISE = 0.10  # per round: a pair's log-ratio spreads by about 0.14

    def __init__(self, clock, ratios, budget_s, focused, seed=5, clearing=None,
                 design=DESIGN, schedule=None, round_s=None):
        workers = {name: pairing.Worker(name, None, None, None) for name in pairing.SIDES}
        progress = pairing.Progress(None, budget_s, started=clock.now)
        super().__init__(workers, design, budget_s, lambda *a: THRESHOLD, progress, focused,
                         clearing=clearing, schedule=schedule)
        self.round_s = round_s or {}  # a benchmark's round time, where not ROUND_S
        self.clock, self.ratios = clock, ratios
        self.rng = np.random.default_rng(seed)
        self.at: str | None = None
        self.replies: list[tuple[str, str]] = []

    def grant(self, worker, reply):
        self.replies.append((worker.name, reply[0]))
        if reply == ["go"]:
            round_s = self.round_s.get(self.at, self.ROUND_S)
            self.clock.now += round_s
            ratio = self.ratios[self.at] if worker.name == "candidate" else 1.0
            worker.timed.setdefault(self.at, []).append(
                round_s * ratio * math.exp(self.rng.normal(0, self.NOISE)))
        return ["round", self.at, None]

    def judge(self):
        self.progress.total = len(self.ratios)
        order = (list(self.ratios) if self.schedule is None
                 else shares.scheduled(list(self.ratios), self.schedule))
        for i, name in enumerate(order):
            self.at = name
            self.pair(name, None, remaining=len(order) - i)
        return {name: r for name, r in self.records.items()}


# Three candidates of one slowdown 15% slower (threshold 10%), 1 s a pair, 90 s in all: an
# equal share reaches 27 pairs, and this seed's pairs need 61 to clear the threshold.
RATIOS = {"decode_a": 1.15, "decode_b": 1.15, "decode_c": 1.15}


def test_equal_shares_leave_a_just_beyond_threshold_slowdown_undecided(clock):
    records = Scripted(clock, RATIOS, budget_s=90, focused=False).judge()
    assert all(r.stopped == "budget" for r in records.values())
    assert not any(r.focused_at for r in records.values())


def test_focusing_decides_it_with_the_same_budget(clock):
    records = Scripted(clock, RATIOS, budget_s=90, focused=True).judge()
    first = records["decode_a"]
    assert first.stopped == "regression"
    assert first.focused_at in DESIGN.looks
    assert first.seconds > 90 / 3  # past its equal share
    assert clock.now <= 1000 + 90  # and not past the deadline


def test_focusing_leaves_the_same_speed_to_equal_shares(clock):
    same = {"a": 1.0, "b": 1.0, "c": 1.0}
    records = Scripted(clock, same, budget_s=90, focused=True).judge()
    assert all(r.stopped == "unchanged" for r in records.values())
    assert not any(r.focused_at for r in records.values())


def test_over_many_seeds_focusing_decides_more_often(monkeypatch):
    decided = {False: set(), True: set()}
    for seed in range(40):
        for focused in (False, True):
            clock = pairing_clock.install(monkeypatch)
            records = Scripted(clock, RATIOS, budget_s=90, focused=focused, seed=seed).judge()
            if any(r.stopped == "regression" for r in records.values()):
                decided[focused].add(seed)
    assert len(decided[True]) >= len(decided[False]) + 8, decided


def test_a_benchmark_that_stops_pointing_at_a_regression_is_back_to_its_share(clock):
    # 12% slower: this seed's pairs point past the threshold at the first look, then not.
    scripted = Scripted(clock, {"a": 1.12, "b": 1.12, "c": 1.12}, budget_s=90, focused=True,
                        seed=0)
    scripted.progress.stream = io.StringIO()
    records = scripted.judge()
    first = records["a"]
    assert first.focused_at == 8 and first.stopped == "budget"
    said = scripted.progress.stream.getvalue()
    assert "a: its pairs no longer point at a regression decided in the time left" in said
    assert "back to its share" in said
    # Each turn is said once, when it happens, not again at every later look.
    assert said.count("a: its pairs no longer point") == said.count("a: slower in its pairs")
    assert first.seconds <= 90 / 3  # within its equal share after all
    assert first.to_json(scripted.workers)["focused_at"] == 8


def test_a_benchmark_reached_after_the_deadline_is_skipped_by_both_sides(clock):
    scripted = Scripted(clock, RATIOS, budget_s=0, focused=True)
    records = scripted.judge()
    assert all(r.stopped == "not reached" for r in records.values())
    assert scripted.replies == [(side, "skip") for _ in RATIOS for side in pairing.SIDES]
    assert not scripted.workers["baseline"].timed


def test_an_unpaired_benchmark_is_inconclusive_and_counts_in_holms_family():
    rng = np.random.default_rng(1)
    base = list(0.5 * np.exp(rng.normal(0, 0.05, 27)))
    cand = [b * 1.3 for b in base]
    alone = sequential.judge_family({"a": (base, cand)}, {"a": THRESHOLD}, DESIGN)
    both = sequential.judge_family({"a": (base, cand), "b": ((), ())},
                                   {"a": THRESHOLD, "b": THRESHOLD}, DESIGN)
    unpaired = both[1]
    assert unpaired.verdict.value == "inconclusive" and unpaired.n_pairs == 0
    assert "no timed pair" in unpaired.reason
    assert both[0].p_adjusted == pytest.approx(min(1.0, 2 * alone[0].p_adjusted))
