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
  suite's gate a paired A/B confirms it too, and one it does not is inconclusive (`unproven`):
  a host that moves more over hours than between the runs that measured the noise makes a
  stored comparison call its move.
- unchanged: on the rounds, and the noise between runs measured, with its interval within
  [1 / (1 + delta), 1 + delta]; else inconclusive (unmeasured noise proves nothing either
  way, so saving more runs never makes a verdict weaker).
- inconclusive stays inconclusive.

Runs of the same code (`runs.same_code`) get no verdict at all: every difference is the
machine's (`GateResult.same_code`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from llmbench.gate.noise import Between
from llmbench.gate.stats import Comparison, Verdict
from llmbench.runs.model import Run


def _between_words(b: Between) -> str:
    return f"between runs [{b.ci_low:.3f}, {b.ci_high:.3f}], p_adj={b.p_adjusted:.2g}"


def stored_verdict(c: Comparison, b: Between | None, alpha: float) -> Comparison:
    """One benchmark's verdict from its rounds (`c`) and its test against the noise between
    runs (`b`; None when that noise is not measured)."""
    up, down = 1 + c.threshold, 1 / (1 + c.threshold)
    if c.verdict is Verdict.REGRESSION:
        if b is None:
            return dataclasses.replace(
                c, verdict=Verdict.NOT_CONFIRMED,
                reason=f"{c.reason}; the noise between runs is not measured yet, so this run "
                       "alone cannot tell the machine's drift from the code")
        if b.p_adjusted <= alpha and b.ci_low > up:
            return dataclasses.replace(c, reason=f"{c.reason}; beyond the noise between runs "
                                                 f"({_between_words(b)})")
        return dataclasses.replace(
            c, verdict=Verdict.NOT_CONFIRMED,
            reason=f"{c.reason}; but within the noise between runs ({_between_words(b)}: a "
                   f"stored comparison calls x{b.smallest_regression:.3f} or more)")
    if c.verdict is Verdict.IMPROVEMENT:
        if b is not None and b.p_adjusted <= alpha and b.ci_high < down:
            return dataclasses.replace(c, reason=f"{c.reason}; beyond the noise between runs "
                                                 f"({_between_words(b)})")
        why = ("the noise between runs is not measured yet" if b is None
               else f"not beyond the noise between runs ({_between_words(b)})")
        return dataclasses.replace(c, verdict=Verdict.INCONCLUSIVE, rounds_needed=None,
                                   reason=f"faster on this run's rounds, but {why}")
    if c.verdict is Verdict.INCONCLUSIVE and (b is None or not down <= b.ci_low <= b.ci_high
                                              <= up):
        # Rounds alone would not decide it either: the noise between runs stands in the way,
        # which no number of rounds in one run can shrink.
        return dataclasses.replace(c, rounds_needed=None)
    if c.verdict is Verdict.UNCHANGED and b is None:
        return dataclasses.replace(
            c, verdict=Verdict.INCONCLUSIVE, rounds_needed=None,
            reason=f"within +/-{c.threshold:.0%} on this run's rounds, but the noise between "
                   "runs is not measured yet")
    if c.verdict is Verdict.UNCHANGED and not down <= b.ci_low <= b.ci_high <= up:
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
        if ab.verdict is Verdict.INCONCLUSIVE and ab.ci_high < 1 + ab.threshold:
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


def comparison_json(c: Comparison) -> dict:
    """A verdict as a run saves it (JSON has no infinity)."""
    out = {**dataclasses.asdict(c), "verdict": c.verdict.value}
    return {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in out.items()}


def comparison_from_json(data: Mapping) -> Comparison:
    fields = {f.name for f in dataclasses.fields(Comparison)}
    values = {k: v for k, v in data.items() if k in fields}
    values["verdict"] = Verdict(values["verdict"])
    values["n_blocks"] = tuple(values.get("n_blocks") or (0, 0))
    if values.get("ci_high") is None:
        values["ci_high"] = math.inf
    return Comparison(**values)


def run_stamp(run: Run) -> dict:
    """What names a saved run across copies and paths: when it ran and its commit."""
    return {"datetime": run.datetime, "commit": run.commit_info.get("id")}


def recorded_confirmation(baseline: Run, candidate: Run) -> Mapping | None:
    """The paired A/B the suite ran when it judged `candidate` against this very `baseline`
    (saved in the candidate's `llmbench` section), or None."""
    recorded = candidate.info.get("confirmation")
    if not isinstance(recorded, Mapping) or recorded.get("baseline") != run_stamp(baseline):
        return None
    return recorded


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
    """The stored improvements among `names` as inconclusive: faster beyond the noise
    measured between runs, but a host whose speed moves more over hours than between those
    runs makes a stored comparison call its move; only a paired A/B that confirms it keeps
    it an improvement."""
    names = set(names)
    return tuple(dataclasses.replace(c, verdict=Verdict.INCONCLUSIVE, rounds_needed=None, reason=(
        f"{c.reason}; not an improvement until a paired A/B confirms it ({why})"))
        if c.name in names and c.verdict is Verdict.IMPROVEMENT else c for c in comparisons)


def unsettled(comparisons: Sequence[Comparison], names, why: str) -> tuple[Comparison, ...]:
    """`names` as no paired A/B settled them: a stored regression not confirmed, a stored
    improvement inconclusive (`unconfirmed`, `unproven`)."""
    return unproven(unconfirmed(comparisons, names, why), names, why)


# The suite's `--no-confirm`: the user declined the A/B, and the stored verdicts stand.
NO_CONFIRM = "--no-confirm"
UNDECIDED = "the paired A/B did not decide it"
LEFT_OUT = "the confirmation's budget left it out"


def apply_recorded(comparisons: Sequence[Comparison], recorded: Mapping, *,
                   settled: bool = False) -> tuple[Comparison, ...]:
    """The stored verdicts settled by a recorded paired A/B, as when it ran: the A/B's
    verdicts, and its candidates it did not decide (or could not run for) not confirmed.
    `settled`: `comparisons` already carry the A/B's verdicts (the confirmation itself)."""
    left = list(recorded.get("left") or ())
    failed = recorded.get("failed") or {}
    failed_names = list(failed.get("benchmarks") or ())
    covered = [*(recorded.get("benchmarks") or ()), *left, *failed_names]
    if recorded.get("status") != "ran":
        why = recorded.get("why")
        if why == NO_CONFIRM:
            return tuple(comparisons)
        return unsettled(comparisons, covered, f"none could run: {why}")
    judged = [comparison_from_json(d) for d in recorded.get("comparisons") or ()]
    decided = {c.name for c in judged if c.verdict is not Verdict.INCONCLUSIVE}
    # Every benchmark the A/B judged, whatever the stored verdict is now: the history (and so
    # the noise between runs) may have grown since, and the A/B's verdict is the one given.
    if not settled:
        comparisons = settle(comparisons, {c.name: c for c in judged})
    out = unconfirmed(comparisons, left, LEFT_OUT)
    if failed_names:
        out = unconfirmed(out, failed_names, f"the further paired A/B failed: {failed.get('why')}")
    return unsettled(out, [k for k in covered if k not in decided], UNDECIDED)
