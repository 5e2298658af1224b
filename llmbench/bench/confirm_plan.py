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
stored comparison is inconclusive may be slower by more than the threshold. What the budget
leaves after the slower benchmarks goes to those (costed, like the slower ones within the
noise, at the first look that can clear them), cheapest first, with nothing reserved for
them (`ab.shares.Schedule.unreserved`): one it does not reach stays inconclusive, as the
stored runs left it, and fails nothing.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from llmbench import runs
from llmbench.gate.sequential import DEFAULT_MAX_PAIRS, Design
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
# confirmed" and fails the run), then one the stored runs could not decide either way (left
# undecided, it stays inconclusive, as it was).
_RANK = {Verdict.REGRESSION: 0, Verdict.NOT_CONFIRMED: 1, Verdict.INCONCLUSIVE: 2}


@dataclass(frozen=True)
class Estimate:
    name: str
    pairs: int  # the look it is expected to be decided at
    seconds: float  # its pairs and any compiling, on both sides
    pair_s: float = 0.0  # one pair of rounds, with the turn-taking around it
    first_look: int = 0  # the first look that can decide it so (clear it, or confirm it)


@dataclass(frozen=True)
class Plan:
    chosen: tuple[str, ...]  # to re-measure, cheapest to decide first
    left: tuple[str, ...]  # not expected to fit: paired after the chosen while time is left
    estimates: dict[str, Estimate]
    start_s: float
    # Candidates the stored runs could not decide either way: paired after the slower ones.
    undecided: frozenset[str] = frozenset()


def _log_sd(samples: Sequence[float]) -> float:
    logs = [math.log(s) for s in samples if s > 0]
    return statistics.stdev(logs) if len(logs) > 1 else 0.0


def fewest_for_regression(design: Design, family: int) -> int:
    """The first look at which an A/B over candidates of a family of `family`, at their share
    of alpha, can call a regression: n pairs all one way give the signed-rank p = 2 / 2^n,
    which times the looks (the sequential p) must be at most alpha / family. (8 pairs can
    never do it; a family of 17 needs 18.)"""
    return next((look for look in design.looks
                 if len(design.looks) * 2 / 2 ** look <= design.alpha / family),
                design.looks[-1])


def fewest_to_clear(design: Design) -> int:
    """The first look at which a candidate can be cleared: its interval's upper bound is
    finite once all-one-way pairs are rare enough, 2 / 2^n <= 2 * look alpha (8 pairs at
    alpha 0.05 and 8 looks, where the bound is the largest pair's ratio)."""
    return next((look for look in design.looks if 2.0 ** -look <= design.look_alpha),
                design.looks[-1])


def pairs_needed(c: Comparison, base: runs.Benchmark, cand: runs.Benchmark,
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
         budget_s: float, design: Design | None = None, family: int | None = None) -> Plan:
    """The candidates to re-measure within `budget_s`: stored regressions first, each group
    by expected cost, cheapest first, while they fit; the first always, so a small budget
    still tries one. `family`: how many candidates share alpha (all the slower benchmarks,
    when these are what an earlier pass left out)."""
    design = design or Design()
    family = max(family or 0, len(candidates))
    load = sum(float(v) for v in (candidate.info.get("load_s"), candidate.info.get("warmup_s"))
               if isinstance(v, (int, float)))
    start = START_S + 2 * load  # the two sides load and warm up one after the other
    estimates = {}
    for c in candidates:
        base, cand = baseline.benchmarks.get(c.name), candidate.benchmarks.get(c.name)
        if base is None or cand is None:
            continue
        if c.verdict is Verdict.REGRESSION:
            n, first = (pairs_needed(c, base, cand, design, family),
                        fewest_for_regression(design, family))
        else:
            # Costed at the first look that can clear it, not from the stored rounds'
            # spread: a pair's two rounds share their moment on the machine, and on a
            # drifting host pairs that cleared at 8 came from rounds whose spread predicted
            # 18 to 27 (docs/measurements/2026-12-03-stable-measurements.md). Costing it
            # higher leaves candidates out and budget unspent; one that needs more pairs
            # takes them from its share of the budget.
            n = first = fewest_to_clear(design)
        pair_s = 2 * max(base.median_s, cand.median_s) * PAIR_OVERHEAD
        seconds = n * pair_s + 2 * _compile_s(cand) + BETWEEN_S
        estimates[c.name] = Estimate(c.name, n, seconds, pair_s, first)
    rank = {c.name: _RANK.get(c.verdict, len(_RANK)) for c in candidates}
    order = sorted(estimates.values(), key=lambda e: (rank[e.name], e.seconds))
    chosen, left, spent = [], [], start
    for estimate in order:
        if not chosen or spent + estimate.seconds <= budget_s:
            chosen.append(estimate.name)
            spent += estimate.seconds
        else:
            left.append(estimate.name)
    left += [c.name for c in candidates if c.name not in estimates]
    undecided = frozenset(c.name for c in candidates if c.verdict is Verdict.INCONCLUSIVE)
    return Plan(tuple(chosen), tuple(left), estimates, start, undecided)


def first_look_s(estimate: Estimate) -> float:
    """What a candidate is expected to cost to its first deciding look: the time a schedule
    reserves for it."""
    return estimate.seconds - (estimate.pairs - estimate.first_look) * estimate.pair_s


def schedule(chosen: Plan) -> dict[str, float]:
    """Every candidate the plan costed, with the time its first deciding look is expected to
    take (`ab.shares`): the slower ones in the plan's order (those it expects to fit first),
    then the undecided ones (`Plan.undecided`, for which nothing is reserved), cheapest
    first."""
    ordered = [name for name in (*chosen.chosen, *chosen.left) if name in chosen.estimates]
    slower = [name for name in ordered if name not in chosen.undecided]
    undecided = sorted((name for name in ordered if name in chosen.undecided),
                       key=lambda name: chosen.estimates[name].seconds)
    return {name: first_look_s(chosen.estimates[name]) for name in (*slower, *undecided)}
