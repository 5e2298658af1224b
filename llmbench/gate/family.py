"""Slower candidates decided together: a closed test over a family, a few pairs each.

A confirmation (`llmbench.bench.confirm`) names a regression of one candidate alone at
alpha / M, M counting every candidate, at one of the K looks of its sequential design: a
signed-rank test needs 18 pairs for that once M passes a dozen, however plain the slowdown
(n pairs all one way give p = 2 / 2^n, times K). A slowdown in shared code, the decode loop
say, makes two dozen benchmarks slower, and the budget decides eight of them alone. The rest
are decided together here, each on the same few pairs (`pairs_for`).

The test is a closed test (Marcus, Peritz and Gabriel, 1976): a member is named a regression
when every subset of the family that holds it is rejected, each subset by one stratified
signed-rank test. Member j's pairs are its log-ratios less ln(1 + delta_j), and W_j is their
signed-rank statistic (`sequential.w_plus`). Under member j's null (its pairs symmetric about
a centre at or below the threshold) W_j is stochastically at most the signed-rank null
distribution; members' pairs are independent, so the sum of W over a subset is at most that
distribution's convolution over the subset, and its upper tail is the subset's p.
Closed testing then bounds at `level` the chance of naming *any* member not past its
threshold, whatever the others do. Every member has the same n pairs, so subsets of one size
differ only in their W: the hardest subset of size k holding member i is i with the k - 1
smallest W of the others. A member's adjusted p is the largest of those k tails.

What it cannot do: a member not past its threshold dilutes every subset it is in. Where the
family mixes a slowdown with benchmarks the slowdown does not touch, fewer members or none
are named, and they stay not confirmed; a member is never named for its neighbours' pairs.
A member alone must pass too (the subset of size one), so n is at least the pairs whose
p, all one way but the smallest pair, reaches `level`.

The convolution takes the members' pairs as independent, as pairs taken minutes apart are
once each pair shares its moment on the machine; a state of one side that lasted through
several members (a co-runner the disturbance check missed) would correlate them and make
the larger subsets' tails too small. The subset of one still bounds each member alone.

The level is the sum of the shares of alpha the members would have had alone (alpha L / M):
with the members decided alone at alpha / M each, the confirmation's chance of a false
regression stays alpha (the union bound). Imports nothing of ours beyond `sequential`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from llmbench.gate import sequential

# Below five pairs a member alone cannot pass at any useful level (1/32), and the pairs of a
# member say little about its own ratio.
MIN_PAIRS = 5


def pairs_for(level: float) -> int:
    """The pairs each member takes: the fewest at which one member alone is named at `level`
    with every pair beyond its threshold but the one nearest it (W+ one short of its
    largest: p = 2 / 2^n), and at least MIN_PAIRS. A slowdown a few percent past the
    threshold often has a pair just short of it, and a member that needs every pair past
    it is then missed (docs/measurements/2026-12-05-family-decisions.md)."""
    if not 0 < level < 1:
        raise ValueError(f"family level must be in (0, 1), got {level!r}")
    return max(MIN_PAIRS, math.ceil(1 - math.log2(level) - 1e-12))


@dataclass(frozen=True)
class Member:
    """One member's judgement in its family."""

    name: str
    pairs: int  # the pairs judged: its first n
    ratio: float  # Hodges-Lehmann centre of those pairs' ratios
    ci_low: float  # their Walsh interval at 1 - 2 * level
    ci_high: float
    p_adjusted: float  # the largest p of the subsets that hold it
    regression: bool  # named: p_adjusted <= level


def _sum_tails(n: int, members: int) -> list[np.ndarray]:
    """For k = 1 .. members, P(sum of k independent null W+ >= w), w = 0 .. k n(n+1)/2."""
    pmf = sequential.signed_rank_pmf(n)
    tails, total = [], np.array([1.0])
    for _ in range(members):
        total = np.convolve(total, pmf)
        tails.append(np.cumsum(total[::-1])[::-1])
    return tails


def _tail(tail: np.ndarray, w: float) -> float:
    # A tie between magnitudes gives a half rank; the tail from the rank below it keeps the
    # test conservative (the null distribution counted is the tie-free one).
    index = math.floor(w + 1e-9)
    return float(tail[index]) if index < tail.size else 0.0


def decide(log_ratios: Mapping[str, Sequence[float]], thresholds: Mapping[str, float],
           level: float, n: int) -> dict[str, Member]:
    """The members of a family judged together on their first `n` pairs' log-ratios (ln
    candidate / baseline); a member with fewer pairs is left out (not in the result).
    `thresholds`: each member's delta."""
    if n < 1:
        raise ValueError(f"a family's members take at least one pair, got {n!r}")
    judged = {name: np.asarray(d, float)[:n] for name, d in log_ratios.items()
              if len(d) >= n}
    if not judged:
        return {}
    w = {name: sequential.w_plus(d - math.log1p(thresholds[name]))
         for name, d in judged.items()}
    tails = _sum_tails(n, len(judged))
    out = {}
    for name, d in judged.items():
        others = sorted(v for other, v in w.items() if other != name)
        hardest = max(_tail(tails[k], w[name] + sum(others[:k])) for k in range(len(judged)))
        centre, low, high = sequential.walsh_interval(d, level)
        out[name] = Member(name, n, math.exp(centre), math.exp(low), math.exp(high),
                           hardest, hardest <= level)
    return out
