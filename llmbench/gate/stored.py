"""What a comparison of two stored runs may conclude, and how a paired A/B settles the rest.

Two runs measured at different moments differ by the machine's drift as well as by the code.
The rounds' verdicts (`stats.compare_family`) are kept only where the noise between runs
(`noise.between_runs`) supports them too:

- regression: on the rounds, and the between-runs test is Holm-significant with its interval
  wholly above 1 + delta. Otherwise the rounds' regression is NOT_CONFIRMED: slower in this
  pair of runs, but not beyond what separate runs of one code differ by (or that noise is not
  measured yet). A paired A/B of the two commits (`confirm`) decides it; its verdict replaces
  the stored one.
- improvement: likewise, else inconclusive (an unproven improvement fails nothing). Under the
  suite's gate a paired A/B confirms it too, and one it does not is not slower (`unproven`):
  a host that moves more over hours than between the runs that measured the noise makes a
  stored comparison call its move.
- unchanged: on the rounds, and the noise between runs measured, with its interval within
  [1 / (1 + delta), 1 + delta]; else inconclusive (unmeasured noise proves nothing either
  way, so saving more runs never makes a verdict weaker).
- inconclusive stays inconclusive.
- not slower: where an unchanged, inconclusive or faster verdict of the above cannot stand,
  but the rounds' interval and the one against the noise between runs both lie below
  1 + delta. Neither "unchanged" nor "improvement" is shown, and a slowdown beyond the
  threshold is ruled out: the gate's question has its answer, and the confirmation's budget
  goes to the benchmarks that are still open.

Runs of the same code (`runs.same_code`) get no verdict at all: every difference is the
machine's (`GateResult.same_code`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from llmbench.gate.confirmation import Confirmation, HostMove
from llmbench.gate.noise import Between
from llmbench.gate.stats import Comparison, Verdict, decide


def _between_words(b: Between) -> str:
    level = (f"x{b.ratio:.3f} against its code's {b.level_runs} saved runs, "
             if b.level_runs > 1 else "")
    return f"between runs {level}[{b.ci_low:.3f}, {b.ci_high:.3f}], p_adj={b.p_adjusted:.2g}"


def shift(c: Comparison, b: Between | None) -> int:
    """Which way a stored comparison shows a benchmark moved beyond the noise: 1 (slower)
    when its rounds' interval and its interval against the noise between runs both lie above
    1, -1 (faster) when both lie below, 0 otherwise or with that noise unmeasured. Whatever
    the verdict: within the threshold or across it, the move itself is shown."""
    if b is None:
        return 0
    if c.ci_low > 1 and b.ci_low > 1:
        return 1
    if c.ci_high < 1 and b.ci_high < 1:
        return -1
    return 0


def _rules_out_slower(c: Comparison, b: Between | None) -> bool:
    """Whether the rounds' interval and the one against the noise between runs both lie below
    1 + delta: slower beyond the threshold is ruled out, as a stored "unchanged" rules it out,
    by the same intervals at the same level."""
    return b is not None and max(c.ci_high, b.ci_high) < 1 + c.threshold


def _not_slower(c: Comparison, b: Between, rounds_said: str) -> Comparison:
    # The gate's question has its answer: a host that moved faster between the two runs (or a
    # real speed-up within the threshold) leaves a benchmark that neither equivalence nor an
    # improvement can be shown for; it is not a candidate, and no budget is spent on it.
    return dataclasses.replace(
        c, verdict=Verdict.NOT_SLOWER, rounds_needed=None,
        reason=f"not slower beyond +{c.threshold:.0%}: {rounds_said}, and against the noise "
               f"between runs ({_between_words(b)})")


def stored_verdict(c: Comparison, b: Between | None, alpha: float) -> Comparison:
    """One benchmark's verdict from its rounds (`c`) and its test against the noise between
    runs (`b`; None when that noise is not measured): the gate's one rule (`stats.decide`)
    on each, and the rounds' verdict kept only where the noise between runs gives it too."""
    # The between-runs test asks the rounds' question: in their direction, or none.
    direction = {Verdict.REGRESSION: 1, Verdict.IMPROVEMENT: -1}.get(c.verdict, 0)
    between = None if b is None else decide(b.p_adjusted <= alpha, direction, b.ci_low,
                                             b.ci_high, c.threshold)
    if c.verdict is Verdict.REGRESSION:
        if b is None:
            return dataclasses.replace(
                c, verdict=Verdict.NOT_CONFIRMED,
                reason=f"{c.reason}; the noise between runs is not measured yet, so this run "
                       "alone cannot tell the machine's drift from the code")
        if between is Verdict.REGRESSION:
            return dataclasses.replace(c, reason=f"{c.reason}; beyond the noise between runs "
                                                 f"({_between_words(b)})")
        return dataclasses.replace(
            c, verdict=Verdict.NOT_CONFIRMED,
            reason=f"{c.reason}; but within the noise between runs ({_between_words(b)}: a "
                   f"stored comparison calls x{b.smallest_regression:.3f} or more)")
    if c.verdict is Verdict.IMPROVEMENT:
        if between is Verdict.IMPROVEMENT:
            return dataclasses.replace(c, reason=f"{c.reason}; beyond the noise between runs "
                                                 f"({_between_words(b)})")
        if _rules_out_slower(c, b):
            return _not_slower(c, b, "faster on this run's rounds")
        why = ("the noise between runs is not measured yet" if b is None
               else f"not beyond the noise between runs ({_between_words(b)})")
        return dataclasses.replace(c, verdict=Verdict.INCONCLUSIVE, rounds_needed=None,
                                   reason=f"faster on this run's rounds, but {why}")
    if c.verdict in (Verdict.INCONCLUSIVE, Verdict.UNCHANGED) and between is not \
            Verdict.UNCHANGED and _rules_out_slower(c, b):
        return _not_slower(c, b, f"{c.verdict} on this run's rounds")
    if c.verdict is Verdict.INCONCLUSIVE and between is not Verdict.UNCHANGED:
        # Rounds alone would not decide it either: the noise between runs stands in the way,
        # which no number of rounds in one run can shrink.
        return dataclasses.replace(c, rounds_needed=None)
    if c.verdict is Verdict.UNCHANGED and b is None:
        return dataclasses.replace(
            c, verdict=Verdict.INCONCLUSIVE, rounds_needed=None,
            reason=f"within +/-{c.threshold:.0%} on this run's rounds, but the noise between "
                   "runs is not measured yet")
    if c.verdict is Verdict.UNCHANGED and between is not Verdict.UNCHANGED:
        return dataclasses.replace(
            c, verdict=Verdict.INCONCLUSIVE, rounds_needed=None,
            reason=f"within +/-{c.threshold:.0%} on this run's rounds, but separate runs of one "
                   f"code differ more ({_between_words(b)})")
    return c


def stored_verdicts(comparisons: Sequence[Comparison], between: Mapping[str, Between],
                    alpha: float) -> tuple[Comparison, ...]:
    return tuple(stored_verdict(c, between.get(c.name), alpha) for c in comparisons)


def settle(comparisons: Sequence[Comparison],
           paired: Mapping[str, Comparison]) -> tuple[Comparison, ...]:
    """The stored verdicts with each benchmark a paired A/B judged replaced by its verdict.
    One the A/B left inconclusive is "not slower" when its interval rules out a regression
    (it lies below 1 + delta), and otherwise keeps its stored verdict: nothing has cleared
    it, nor added to what the stored runs showed."""
    out = []
    for c in comparisons:
        ab = paired.get(c.name)
        if ab is None:
            out.append(c)
            continue
        if ab.verdict is Verdict.INCONCLUSIVE and ab.rules_out_slower:
            # Undecided between unchanged and faster, but its interval rules out what the
            # gate asks: slower beyond the threshold. Cleared: not slower.
            out.append(dataclasses.replace(
                ab, verdict=Verdict.NOT_SLOWER, rounds_needed=None,
                reason=f"paired A/B: not slower beyond +{ab.threshold:.0%} (CI high "
                       f"{ab.ci_high:.3f}); {ab.reason} (stored runs: x{c.ratio:.3f}, "
                       f"{c.verdict})"))
            continue
        if ab.verdict is Verdict.INCONCLUSIVE:
            out.append(dataclasses.replace(
                c, reason=f"{c.reason}; the paired A/B could not decide it: {ab.reason}"))
            continue
        out.append(dataclasses.replace(
            ab, reason=f"paired A/B: {ab.reason} (stored runs: x{c.ratio:.3f}, {c.verdict})"))
    return tuple(out)


def unconfirmed(comparisons: Sequence[Comparison], names, why: str) -> tuple[Comparison, ...]:
    """The stored regressions among `names` as "not confirmed": a stored comparison flags a
    slowdown, and only a paired A/B that confirms it makes it a regression (a run disturbed
    by other work can be several times slower on a few benchmarks, beyond any noise
    measured between quiet runs)."""
    names = set(names)
    return tuple(dataclasses.replace(c, verdict=Verdict.NOT_CONFIRMED, reason=(
        f"{c.reason}; not a regression until a paired A/B confirms it ({why})"))
        if c.name in names and c.verdict is Verdict.REGRESSION else c for c in comparisons)


def unproven(comparisons: Sequence[Comparison], names, why: str) -> tuple[Comparison, ...]:
    """The stored improvements among `names` as not slower: faster beyond the noise
    measured between runs, but a host whose speed moves more over hours than between those
    runs makes a stored comparison call its move, so only a paired A/B that confirms it keeps
    it an improvement. Slower beyond the threshold it is not: both its intervals lie below
    1 / (1 + delta) (inconclusive, should one not)."""
    names = set(names)

    def withdrawn(c: Comparison) -> Comparison:
        ruled_out = c.rules_out_slower  # said only where it holds
        return dataclasses.replace(
            c, verdict=Verdict.NOT_SLOWER if ruled_out else Verdict.INCONCLUSIVE,
            rounds_needed=None,
            reason=f"{c.reason}; not an improvement until a paired A/B confirms it ({why})"
                   + (", not slower either" if ruled_out else ""))

    return tuple(withdrawn(c) if c.name in names and c.verdict is Verdict.IMPROVEMENT else c
                 for c in comparisons)


def unsettled(comparisons: Sequence[Comparison], names, why: str) -> tuple[Comparison, ...]:
    """`names` as no paired A/B settled them: a stored regression not confirmed, a stored
    improvement not slower (`unconfirmed`, `unproven`)."""
    return unproven(unconfirmed(comparisons, names, why), names, why)


UNDECIDED = "the paired A/B did not decide it"
LEFT_OUT = "the confirmation's budget left it out"


def _left_out(comparisons: Sequence[Comparison], left: Sequence[str], commit: str
              ) -> tuple[Comparison, ...]:
    """The candidates the budget left out say why and how to decide them (a stored regression
    among them is then made "not confirmed" by `unconfirmed`)."""
    out = []
    for c in comparisons:
        if c.name in left:
            went = ("the slower benchmarks first" if c.verdict in (
                Verdict.INCONCLUSIVE, Verdict.IMPROVEMENT) else
                    "stored regressions first, then to the slower benchmarks cheapest to "
                    "decide")
            c = dataclasses.replace(c, reason=(
                f"{c.reason}; not re-measured: the confirmation's budget went to {went} "
                f"(`llmbench ab {commit[:8]} -- -k ...` decides it)"))
        out.append(c)
    return tuple(out)


def settle_by(comparisons: Sequence[Comparison], confirmation: Confirmation
              ) -> tuple[Comparison, ...]:
    """The stored verdicts as a confirmation settles them, the one way the suite's gate (as it
    runs the A/B) and every later reader of the saved run (`recorded`) derive them: the A/B's
    verdicts (`settle`); its candidates the budget left out, or that it did not decide, or for
    which none could run, not confirmed if slower and not slower if faster (`unsettled`).
    Declined (--no-confirm): the stored verdicts stand."""
    if not confirmation.ran:
        if confirmation.declined:
            return tuple(comparisons)
        return unsettled(comparisons, confirmation.covered,
                         f"none could run: {confirmation.why}")
    decided = {c.name for c in confirmation.comparisons if c.verdict is not Verdict.INCONCLUSIVE}
    # Every benchmark the A/B judged, whatever the stored verdict is now: the history (and so
    # the noise between runs) may have grown since, and the A/B's verdict is the one given.
    out = settle(_left_out(comparisons, confirmation.left, confirmation.against),
                 {c.name: c for c in confirmation.comparisons})
    out = unconfirmed(out, confirmation.left, LEFT_OUT)
    if confirmation.failed:
        names, why = confirmation.failed
        out = unconfirmed(out, names, f"the further paired A/B failed: {why}")
    out = unsettled(out, [k for k in confirmation.covered if k not in decided], UNDECIDED)
    return _cleared_by_the_move(out, confirmation.host_move)


def _cleared_by_the_move(comparisons: Sequence[Comparison], moved: HostMove | None
                         ) -> tuple[Comparison, ...]:
    """The candidates no pair decided (not confirmed, inconclusive) that their stored ratio
    over the machine's move, as the A/B's pairs measured it, clears (`gate.host_move`): not
    slower. Nothing else changes: the move never names a regression. A saved interval is
    checked against the threshold again, so a damaged or edited file clears nothing."""
    if moved is None:
        return tuple(comparisons)
    out = []
    for c in comparisons:
        judged = moved.judged.get(c.name)
        if judged is not None and judged.not_slower and math.isfinite(judged.ci_high) \
                and judged.ci_high < 1 + c.threshold and c.verdict in (
                    Verdict.NOT_CONFIRMED, Verdict.INCONCLUSIVE):
            against = judged.move if math.isfinite(judged.move) else moved.ratio
            c = dataclasses.replace(
                c, verdict=Verdict.NOT_SLOWER, rounds_needed=None,
                reason=f"not slower beyond +{c.threshold:.0%}: stored x{c.ratio:.3f} over the "
                       f"machine's move x{against:.3f} (measured by the paired A/B on "
                       f"other benchmarks) is x{judged.ratio:.3f} [{judged.ci_low:.3f}, "
                       f"{judged.ci_high:.3f}] against this benchmark's own noise between "
                       "runs")
        out.append(c)
    return tuple(out)
