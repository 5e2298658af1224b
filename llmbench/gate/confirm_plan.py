"""Which candidates the confirmation's budget can decide: stored regressions first, then the
slower benchmarks cheapest to decide, then those the stored runs could not decide at all.

A paired A/B shares its budget equally among the benchmarks it is given. Handed every
slower benchmark of a run (a slowdown in the decode loop makes a dozen of them slower), each
gets a share too small for the pairs a regression needs (12 at the least), and the A/B
decides none: the run ends "not confirmed" although the slowdown is real. So the
confirmation re-measures only the candidates its budget can decide, chosen by what each is
expected to cost: the pairs it needs times a pair's time (both sides' rounds), plus
compiling on both sides for a compiled case. A stored regression (beyond the noise between
runs) is expected to be confirmed: its pairs come from its stored ratio's margin over the
threshold and its rounds' spread, as a power calculation at the family's per-look level. A
candidate within that noise is expected to be the machine's drift, which pairs remove: its
pairs are those of the first look that can clear it (the interval's upper bound below
1 + threshold at the unsplit level, `sequential`, Clearing). Stored regressions go
first, since only a confirmation lets them fail the run. All of them then run in one A/B,
in this order, on a schedule that reserves each one's first look (`ab.shares`): the plan's
costs come from the stored runs, which quiet pairs often beat, so the candidates it expects
the budget to leave out are paired too while time is left for them. Those the A/B does not
reach stay "not confirmed", and the line says which and how to decide them. One confirmed
regression already fails the run; the rest only name more.

The drift between two runs hides a slowdown as readily as it fakes one: a benchmark whose
stored comparison is inconclusive may be slower by more than the threshold. One the stored
runs show slower beyond their noise, within the threshold (`slower_undecided`), is taken
with the slower ones, by its cost: a slowdown of the decode loop slows every case that
decodes, and on a machine that drifted slower since the baseline the cases it slows most
are "not confirmed" while the decode benchmarks, cheapest to decide and the purest signal,
are only "slower by" a range that straddles the threshold; ranked behind the others they
were never reached. What the
budget leaves after the slower benchmarks goes to the rest of the undecided (costed, like
the slower ones within the noise, at the first look that can clear them), cheapest first,
with nothing reserved for them (`ab.shares.Schedule.unreserved`). An undecided benchmark
the A/B does not reach stays inconclusive, as the stored runs left it, and fails nothing.

Decided alone, a regression among more than a dozen candidates needs 18 pairs, and a
slowdown in the decode loop makes two dozen slower: the budget decides eight. So only the
slower candidates the budget holds beside the others' family share are decided alone (the
first always); the rest form a family (`Plan.family`), each member the same few pairs,
judged together by a closed test at the sum of their shares of alpha (`gate.family`),
cheapest first, those the budget is not expected to reach listed in `Plan.left`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from llmbench import runs
from llmbench.gate import family
from llmbench.gate.sequential import DEFAULT_MAX_PAIRS, Design, fewest_for_regression
from llmbench.gate.stats import Comparison, Verdict

# A pair costs both rounds and the turn-taking around them (the worker's handshake, the
# round's own output check): a margin on the two rounds' time.
PAIR_OVERHEAD = 1.3
# Starting both sides (collection, loading the model in turn, warm-up) beyond what the runs
# recorded for loading and warming, and moving from one benchmark to the next.
START_S, BETWEEN_S = 15.0, 3.0
POWER = 0.8
# The order the candidates take the budget in: a stored regression (only its confirmation
# fails the run), then a slower benchmark within the noise (left undecided, it is "not
# confirmed" and fails the run) or one shown slower within the threshold (`plan`'s
# `slower_undecided`), then one the stored runs could not decide either way (left
# undecided, it stays inconclusive, as it was), then a stored improvement (left unconfirmed,
# it is not slower: the gate's question has its answer, only the improvement is unproven).
_RANK = {Verdict.REGRESSION: 0, Verdict.NOT_CONFIRMED: 1, Verdict.INCONCLUSIVE: 2,
         Verdict.IMPROVEMENT: 3}
_SLOWER_RANK = _RANK[Verdict.NOT_CONFIRMED]
_OPEN = (Verdict.INCONCLUSIVE, Verdict.IMPROVEMENT)  # neither slower: nothing reserved


@dataclass(frozen=True)
class Estimate:
    name: str
    pairs: int  # the look it is expected to be decided at
    seconds: float  # its pairs and any compiling, on both sides
    pair_s: float = 0.0  # one pair of rounds, with the turn-taking around it
    first_look: int = 0  # the first look that can decide it so (clear it, or confirm it)

    def at(self, pairs: int) -> float:
        """What it is expected to cost at `pairs` pairs, compiling and the move included."""
        return self.seconds + (pairs - self.pairs) * self.pair_s


@dataclass(frozen=True)
class Plan:
    chosen: tuple[str, ...]  # decided alone, in order: stored regressions first, then cheapest
    left: tuple[str, ...]  # not expected to fit: paired after the others while time is left
    estimates: dict[str, Estimate]
    start_s: float
    # Candidates the stored runs could not decide either way: paired after the slower ones.
    undecided: frozenset[str] = frozenset()
    # Slower candidates the budget cannot decide alone, decided together (`gate.family`):
    # each takes `family_pairs` pairs, and the family is judged at `family_level`.
    family: tuple[str, ...] = ()
    family_pairs: int = 0
    family_level: float = 0.0


def _log_sd(samples: Sequence[float]) -> float:
    logs = [math.log(s) for s in samples if s > 0]
    return statistics.stdev(logs) if len(logs) > 1 else 0.0


def fewest_to_clear(design: Design) -> int:
    """The first look at which a candidate can be cleared: its interval's upper bound is
    finite once all-one-way pairs are rare enough, 2 / 2^n <= 2 * look alpha (8 pairs at
    alpha 0.05 and 8 looks, where the bound is the largest pair's ratio)."""
    return next((look for look in design.looks if 2.0 ** -look <= design.look_alpha),
                design.looks[-1])


def expected_pairs(c: Comparison, base: runs.Benchmark, cand: runs.Benchmark,
                 design: Design, benchmarks: int) -> int:
    """The look at which a paired A/B is expected to call `c` a regression: the pairs for
    the interval of the pairs' log-ratios to clear 1 + threshold, at the spread of the two
    runs' rounds (a pair's log-ratio spreads by about sqrt(2) times one round's)."""
    margin = math.log(c.ratio) - math.log(1 + c.threshold)
    if margin <= 0:
        return DEFAULT_MAX_PAIRS
    spread = math.sqrt(2) * max(_log_sd(base.samples), _log_sd(cand.samples), 1e-3)
    z = statistics.NormalDist().inv_cdf(1 - design.look_alpha / (2 * max(1, benchmarks)))
    n = math.ceil(((z + statistics.NormalDist().inv_cdf(POWER)) * spread / margin) ** 2)
    fewest = fewest_for_regression(design, benchmarks)
    return next((look for look in design.looks if look >= max(n, fewest)), design.looks[-1])


def _compile_s(bench: runs.Benchmark) -> float:
    compiled = bench.extra_info.get("compile")
    seconds = compiled.get("warmup_s") if isinstance(compiled, dict) else None
    return float(seconds) if isinstance(seconds, (int, float)) and seconds > 0 else 0.0


def plan(candidates: Sequence[Comparison], baseline: runs.Run, candidate: runs.Run,
         budget_s: float, design: Design | None = None, family_size: int | None = None,
         slower_undecided: frozenset[str] = frozenset()) -> Plan:
    """The candidates to re-measure within `budget_s`: stored regressions first, each group
    by expected cost, cheapest first, decided alone while they fit; the first always, so a
    small budget still tries one. The slower ones that do not fit are decided together, a
    few pairs each (`Plan.family`). `family_size`: how many candidates share alpha (at least
    these). `slower_undecided`: inconclusive candidates the stored runs show slower within
    the threshold, planned as slower ones."""
    design = design or Design()
    family_size = max(family_size or 0, len(candidates))
    load = sum(float(v) for v in (candidate.info.get("load_s"), candidate.info.get("warmup_s"))
               if isinstance(v, (int, float)))
    start = START_S + 2 * load  # the two sides load and warm up one after the other
    estimates = {}
    for c in candidates:
        base, cand = baseline.benchmarks.get(c.name), candidate.benchmarks.get(c.name)
        if base is None or cand is None:
            continue
        if c.verdict is Verdict.REGRESSION:
            n, first = (expected_pairs(c, base, cand, design, family_size),
                        fewest_for_regression(design, family_size))
        else:
            # Costed at the first look that can clear it, not from the stored rounds'
            # spread: a pair's two rounds share their moment on the machine, and on a
            # drifting host pairs that cleared at 8 came from rounds whose spread predicted
            # 18 to 27 (docs/measurements/2026-12-03-stable-measurements.md). Costing it
            # higher leaves candidates out and budget unspent; one that needs more pairs
            # takes them from its share of the budget.
            n = first = fewest_to_clear(design)
        pair_s = 2 * max(base.round_wall_s, cand.round_wall_s) * PAIR_OVERHEAD
        seconds = n * pair_s + 2 * _compile_s(cand) + BETWEEN_S
        estimates[c.name] = Estimate(c.name, n, seconds, pair_s, first)
    rank = {c.name: _SLOWER_RANK if c.name in slower_undecided else
            _RANK.get(c.verdict, len(_RANK)) for c in candidates}
    order = sorted(estimates.values(), key=lambda e: (rank[e.name], e.seconds))
    undecided = frozenset(c.name for c in candidates
                          if c.verdict in _OPEN and c.name not in slower_undecided)
    missing = tuple(c.name for c in candidates if c.name not in estimates)
    slower = [e for e in order if e.name not in undecided]
    # Decided alone, a slower benchmark within the noise between runs is cleared at the
    # first look when the drift made it, and needs the look that names a regression when
    # the code did: whether they all fit alone is reckoned at the dearer.
    regression_look = fewest_for_regression(design, family_size)

    def alone_s(e: Estimate) -> float:
        return e.at(max(e.pairs, regression_look))

    fit, spent = 0, start
    for e in slower:
        if not fit or spent + alone_s(e) <= budget_s:
            fit, spent = fit + 1, spent + alone_s(e)
    if fit == len(slower):
        alone, _ = _fit(order, start, budget_s)
        return Plan(tuple(alone), tuple(e.name for e in order if e.name not in alone)
                    + missing, estimates, start, undecided)
    # They do not: those the budget cannot hold beside the family's share of every later
    # one are decided together. The pairs are reckoned for the family as large as decided
    # alone would leave it; a larger family gets a larger share of alpha, so it needs no
    # more pairs than that.
    pairs = family.pairs_for(design.alpha * (len(slower) - fit) / family_size)
    alone, spent = [], start
    for i, e in enumerate(slower):
        rest = sum(together_s(later, pairs) for later in slower[i + 1:])
        if not alone or spent + alone_s(e) + rest <= budget_s:
            alone.append(e.name)
            spent += alone_s(e)
        else:
            spent += together_s(e, pairs)
    together = [e for e in slower if e.name not in alone]
    level = design.alpha * len(together) / family_size
    pairs = family.pairs_for(level)
    together.sort(key=lambda e: together_s(e, pairs))  # the most members in the budget
    spent = start + sum(alone_s(e) for e in slower if e.name in alone)
    left = []
    for e in together:
        if spent + together_s(e, pairs) <= budget_s:
            spent += together_s(e, pairs)
        else:
            left.append(e.name)
    for e in order:  # the undecided, after the family: each while it fits
        if e.name in undecided:
            if spent + e.seconds <= budget_s:
                alone.append(e.name)
                spent += e.seconds
            else:
                left.append(e.name)
    return Plan(tuple(alone), (*left, *missing), estimates, start, undecided,
                tuple(e.name for e in together), pairs, level)


def _fit(order: Sequence[Estimate], start: float, budget_s: float) -> tuple[list[str], float]:
    """The candidates decided alone that fit in `budget_s`, in `order`; the first always,
    so a small budget still tries one."""
    chosen, spent = [], start
    for estimate in order:
        if not chosen or spent + estimate.seconds <= budget_s:
            chosen.append(estimate.name)
            spent += estimate.seconds
    return chosen, spent


def together_s(estimate: Estimate, pairs: int) -> float:
    """What a candidate is expected to cost as a member of the family: its `pairs` pairs,
    any compiling and the move to it."""
    return estimate.at(pairs)


def first_look_s(estimate: Estimate) -> float:
    """What a candidate is expected to cost to its first deciding look: the time a schedule
    reserves for it."""
    return estimate.at(estimate.first_look)


def schedule(chosen: Plan) -> dict[str, float]:
    """Every candidate the plan costed, with the time its first deciding look is expected to
    take (`ab.shares`): the slower ones decided alone in the plan's order, then the family
    (each its pairs), then the undecided ones (`Plan.undecided`, for which nothing is
    reserved), cheapest first."""
    together = set(chosen.family)
    ordered = [name for name in (*chosen.chosen, *chosen.left) if name in chosen.estimates]
    alone = [name for name in ordered if name not in chosen.undecided | together]
    undecided = sorted((name for name in chosen.estimates if name in chosen.undecided),
                       key=lambda name: chosen.estimates[name].seconds)
    return {**{name: first_look_s(chosen.estimates[name]) for name in alone},
            **{name: together_s(chosen.estimates[name], chosen.family_pairs)
               for name in chosen.family},
            **{name: first_look_s(chosen.estimates[name]) for name in undecided}}
