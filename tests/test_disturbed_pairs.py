"""A paired A/B drops a pair in which other work disturbed either round, on both sides, and
takes it again: the verdict rests on undisturbed pairs only, and the pairing counts the
dropped ones. Driven by scripted workers on a fake clock (as test_focus)."""

from __future__ import annotations

import math

import numpy as np

from llmbench.ab import pair_worker, pairing
from llmbench.gate import sequential

DESIGN = sequential.Design()


class Scripted(pairing.Coordinator):
    """Each round takes 0.5 s; rounds numbered in `disturbed` (per side, in order) report that
    others took half of the CPUs; a reply that says "forget" drops the side's last round."""

    def __init__(self, clock, disturbed: dict[str, set[int]], budget_s=60.0):
        workers = {name: pairing.Worker(name, None, None, None) for name in pairing.SIDES}
        super().__init__(workers, DESIGN, budget_s, lambda *a: 0.10,
                         pairing.Progress(None, budget_s, started=clock.now),
                         disturbed_share=0.03)
        self.clock, self.disturbed = clock, disturbed
        self.rng = np.random.default_rng(3)
        self.rounds = {name: 0 for name in pairing.SIDES}
        self.kept: dict[str, list[float]] = {name: [] for name in pairing.SIDES}
        self.forgot = {name: 0 for name in pairing.SIDES}

    def grant(self, worker, reply):
        reply = self.with_forget(worker, reply)
        if reply[-1] == pair_worker.FORGET:  # what the worker does with it
            self.kept[worker.name].pop()
            self.forgot[worker.name] += 1
        if reply[0] == "go":
            self.clock.now += 0.5
            seconds = 0.5 * math.exp(self.rng.normal(0, 0.02))
            index = self.rounds[worker.name]
            self.rounds[worker.name] += 1
            others = 0.5 if index in self.disturbed.get(worker.name, ()) else 0.0
            worker.last_took = ("a", True, others)
            worker.timed.setdefault("a", []).append(seconds)
            worker.others.setdefault("a", []).append(others)
            self.kept[worker.name].append(seconds)
        return ["round", "a", None]


def test_a_disturbed_round_drops_its_pair_on_both_sides(clock):
    scripted = Scripted(clock, {"candidate": {2}, "baseline": {5}})
    scripted.progress.total = 1
    scripted.pair("a", None, remaining=1)
    record = scripted.records["a"]
    assert record.disturbed == 2
    assert record.stopped == "unchanged"
    base, cand = scripted.workers["baseline"], scripted.workers["candidate"]
    # The coordinator's pairs and each side's kept rounds are the same undisturbed ones.
    assert base.timed["a"] == scripted.kept["baseline"]
    assert cand.timed["a"] == scripted.kept["candidate"]
    assert len(base.timed["a"]) == len(cand.timed["a"]) == scripted.rounds["baseline"] - 2
    assert scripted.forgot == {"baseline": 2, "candidate": 2}
    assert all(s == 0.0 for w in (base, cand) for s in w.others["a"])
    assert scripted.progress.pairs == len(base.timed["a"])
    assert record.to_json(scripted.workers)["disturbed"] == 2


def test_a_share_of_one_keeps_every_pair(clock):
    scripted = Scripted(clock, {"candidate": {2}})
    scripted.disturbed_share = 1.0
    scripted.pair("a", None, remaining=1)
    assert scripted.records["a"].disturbed == 0
    assert scripted.forgot == {"baseline": 0, "candidate": 0}


def test_a_machine_disturbed_throughout_decides_nothing_within_the_budget(clock):
    always = set(range(1000))
    scripted = Scripted(clock, {"baseline": always}, budget_s=20)
    scripted.pair("a", None, remaining=1)
    record = scripted.records["a"]
    assert record.stopped == "budget" or not scripted.workers["baseline"].timed["a"]
    assert not scripted.workers["baseline"].timed["a"]
    assert record.disturbed > 0
