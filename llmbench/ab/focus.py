"""When one benchmark of a paired A/B may have the rest of the budget instead of its share.

A paired A/B shares its budget equally, so that one benchmark that cannot be decided does not
starve the others. A confirmation asks something narrower: does any of these slower
benchmarks truly regress? One confirmed regression already fails the run. A slowdown just
beyond the threshold needs many pairs (its interval must clear 1 + threshold, not merely 1),
and equal shares can then leave every candidate undecided although each is plainly slower
in its pairs. So, when focusing, a benchmark whose pairs at a look already show it slower
(the look's interval lies above 1) and point beyond the threshold (their centre is past
it) may go on past its share, up to the end of the budget, while the look that should
decide it, at the spread its pairs show, still fits in what is left. This is asked again at
every look: once the pairs no longer point at a regression, or the deciding look no longer
fits, the benchmark is back to its share (and stops at once if it is already past it). The
benchmarks after it may then get no pair at all: they are reached after the deadline and
skipped (`pairing`), which a confirmation reports as not confirmed.

This spends time, not error rate: the sequential design's P and intervals hold at whatever
look a benchmark stops, however that look was chosen (`sequential`).

A member of a confirmation's family (`gate.family`) takes a few pairs and is judged with
the others by a closed test on them, which names only a slowdown far past the threshold: a
slowdown just past it goes unnamed in a large family, whose members get the fewest pairs.
So a member whose few pairs point at a regression leaves the family (`leaving_look`)
and is decided alone, on fresh pairs, at its own share of alpha, when the look that should
decide it fits in the time left: the later members get what it leaves, since one
regression named fails the run, where their few pairs would only name more. Its share is
then no longer the family's: the family is judged at the shares of those that stayed. The
pairs that chose it are not judged again, so its own test holds at its share whatever chose
it; and whether it leaves depends only on its own pairs, which the members that stay do not
share, so the family's test holds at its level. It may take fresh pairs up to the look chosen
when it left (`leaving_look`), stopping earlier only when a look decides or clears it: its
first fresh looks are too few to re-estimate from (a noisy benchmark's first eight would
send it back to a share it has already spent), and often too few to name it at all, while
the look chosen from the pairs that chose it spends no alpha of the fresh ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from llmbench.gate import sequential


def deciding_look(est: sequential.PairedEstimate, design: sequential.Design,
                  threshold: float) -> int | None:
    """The look at which pairs spread like these should call a regression; None when the
    pairs do not point at one (not slower at this look's confidence, or centred within
    the threshold) or when no look of the design is expected to reach it."""
    if est.ci_low <= 1 or est.centre <= math.log1p(threshold):
        return None
    needed = sequential.pairs_needed(est, design, threshold)
    return next((look for look in design.looks if look >= needed), None)


def takes_the_rest(est: sequential.PairedEstimate | None, design: sequential.Design,
                   threshold: float, per_pair_s: float, left_s: float) -> bool:
    """Whether a benchmark undecided at the look of `est` should go on past its share: its
    pairs point at a regression and the pairs up to the look that should decide it, at
    `per_pair_s` each, fit in the `left_s` seconds before the deadline."""
    if est is None:
        return False
    look = deciding_look(est, design, threshold)
    return look is not None and (look - est.n) * per_pair_s <= left_s


def leaving_look(d: Sequence[float], design: sequential.Design, threshold: float,
                 benchmarks: int, per_pair_s: float, left_s: float) -> int | None:
    """The look of fresh pairs at which a family member whose pairs are the log-ratios `d`
    (its family's few) should be decided alone; None: it stays in the family. It leaves
    when they point at a regression (their interval at the design's alpha lies above 1,
    their centre beyond the threshold; a look's share of alpha gives no finite bound on
    fewer pairs than the first look), and the fresh pairs up to the look that should decide
    it, no earlier than the first at which one of `benchmarks` can be named, fit in the
    `left_s` seconds at `per_pair_s` each."""
    d = np.asarray(d, float)
    if d.size < 2:
        return None
    centre, low, high = sequential.walsh_interval(d, design.alpha)
    est = sequential.PairedEstimate(n=0, centre=centre, scale=sequential.robust_scale(d),
                                    p_value=1.0, ci_low=math.exp(low), ci_high=math.exp(high))
    look = deciding_look(est, design, threshold)
    if look is None:
        return None
    look = max(look, sequential.fewest_for_regression(design, benchmarks))
    return look if look * per_pair_s <= left_s else None
