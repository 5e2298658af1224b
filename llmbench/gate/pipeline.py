"""One stored verdict's way from the rounds to the exit code, in the order it takes (`judge`):

1. screen (`compare.screen_runs`): each benchmark judged on the two runs' rounds, the verdict
   kept only where the noise between runs supports it (`stored.stored_verdict`); runs of the
   same code get none.
2. what to confirm (`request`): the slower benchmarks (a stored regression or not confirmed),
   then those the stored runs could not decide or called faster; or why no paired A/B can
   reproduce the two runs (`why_not`), or that the user declined one (--no-confirm).
3. plan (`request`, `confirm_plan`): which the budget decides alone, which together as a
   family, the order and the time reserved for each, the A/B's level: a `Request`.
4. the paired A/B: the one step the gate does not take, since it starts processes. The suite
   hands `judge` a runner (`llmbench.bench.confirm.runner`, which calls `llmbench.ab.run_ab`)
   that takes the `Request` and returns the A/B's verdicts.
5. conclude (`conclude`): the A/B's verdicts, the family decided together (`family`), the
   machine's move between the runs as the pairs measured it and the candidates no pair
   decided that it clears (`host_move`), all in one typed `Confirmation`, which the suite
   saves in the run.
6. settle (`settle`, `stored.settle_by`): every verdict from the stored one and the
   confirmation, the same way whether the confirmation just ran or is read back from the
   saved run (`compare_runs`: `llmbench compare`, `report`, the dashboard).
7. render (`render`) and exit (`GateResult.exit_code`, from `errors.Exit`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from llmbench.errors import UserError
from llmbench.gate import confirm_plan, family, host_move, sequential, stored
from llmbench.gate.compare import GateOptions, GateResult, Judged, screen_runs
from llmbench.gate.confirmation import (
    NO_CONFIRM,
    Confirmation,
    Family,
    HostMove,
    Status,
    not_run,
    recorded,
    run_stamp,
)
from llmbench.gate.render import summary_line
from llmbench.gate.stats import Comparison, Verdict
from llmbench.runs import code_of
from llmbench.runs.model import Run


@dataclass(frozen=True)
class Request:
    """What the paired A/B of a confirmation is asked to re-measure, and how."""

    commit: str  # the baseline's commit: the A/B's REV
    slower: tuple[str, ...]  # the slower candidates
    undecided: tuple[str, ...]  # those the stored runs could not decide either way
    plan: confirm_plan.Plan
    first_looks: Mapping[str, float]  # name -> seconds to its first deciding look, in order
    options: GateOptions  # the A/B's: alpha split over the candidates it is given
    clearing_alpha: float  # the unsplit alpha at which a candidate may be cleared
    budget_s: float

    @property
    def keys(self) -> tuple[str, ...]:
        """Every candidate: the slower ones, then the undecided."""
        return (*self.slower, *self.undecided)

    @property
    def unreserved(self) -> frozenset[str]:
        """Those nothing is reserved for (`ab.shares`): the undecided the plan costed."""
        return self.plan.undecided & self.first_looks.keys()


# The paired A/B: the request in, its verdicts (with every pair, `GateResult.pairing`) out;
# `UserError` when it fails.
PairRunner = Callable[[Request], GateResult]


def slower(result: GateResult) -> list[str]:
    """The benchmarks slower in the stored runs (regression or not confirmed): every one is
    confirmed before it fails the gate."""
    if result.judged is not Judged.STORED:
        return []
    return [c.name for c in result.comparisons
            if c.verdict in (Verdict.REGRESSION, Verdict.NOT_CONFIRMED)]


def undecided(result: GateResult) -> list[str]:
    """The benchmarks the stored runs could not decide (inconclusive), and those they call
    faster: the drift between two runs hides a slowdown as readily as it fakes one, and a
    host whose speed moves more over hours than between the runs that measured the noise
    makes a stored comparison call its move an improvement, on a benchmark the code did not
    touch (docs/measurements/2026-12-05-family-decisions.md).
    What the confirmation's budget leaves after the slower benchmarks goes to these. One it
    does not decide stays, or becomes, inconclusive (`stored.unproven`)."""
    if result.judged is not Judged.STORED:
        return []
    return [c.name for c in result.comparisons
            if c.verdict in (Verdict.INCONCLUSIVE, Verdict.IMPROVEMENT)]


def slower_undecided(result: GateResult) -> list[str]:
    """The undecided (`undecided`) that the stored runs show slower beyond their noise, though
    not beyond the threshold (`stored.shift`): a slowdown the drift between the runs shrank
    looks so. The confirmation pairs them with the slower benchmarks, cheapest first, so a
    slowdown of the decode loop is decided on the decode benchmarks, the cheapest and the
    purest, rather than after every case the drift made slower; unreached they stay
    inconclusive, as the stored runs left them."""
    open_keys = set(undecided(result))
    return [c.name for c in result.comparisons if c.name in open_keys
            and stored.shift(c, result.between.get(c.name)) > 0]


def why_not(result: GateResult) -> str | None:
    """Why no paired A/B can reproduce what the two runs measured; None when one can. Both
    sides of an A/B run the libraries installed now, so versions must be the same."""
    base, cand = code_of(result.baseline), code_of(result.candidate)
    if not base.commit:
        return "the baseline run recorded no commit (it was not run from a git checkout)"
    if base.dirty:
        return (f"the baseline ran uncommitted changes on {base.commit[:8]}, which no checkout "
                "can reproduce")
    if base.injected:
        return "the baseline ran with an injected slowdown"
    for code, side in ((base, "baseline"), (cand, "candidate")):
        if code.external_server:
            return (f"the {side}'s server benchmarks measured {code.external_server}, which "
                    "no checkout reproduces")
    if base.versions != cand.versions:
        changed = [f"{k} {dict(base.versions).get(k)} -> {dict(cand.versions).get(k)}"
                   for k in sorted(set(dict(base.versions)) | set(dict(cand.versions)))
                   if dict(base.versions).get(k) != dict(cand.versions).get(k)]
        return (f"library versions differ ({', '.join(changed)}): both sides of an A/B run "
                "the versions installed now; A/B them in two environments by hand")
    return None


def request(result: GateResult, budget_s: float | None) -> Request | Confirmation | None:
    """What a confirmation of the screened `result` asks of a paired A/B within `budget_s`
    (None: --no-confirm); a not-run `Confirmation` when none can run (or the user declined
    one) for candidates that call for it; None when nothing does."""
    slower_keys, open_keys = slower(result), undecided(result)
    why = NO_CONFIRM if budget_s is None else why_not(result)
    if why is not None:
        faster = [c.name for c in result.comparisons
                  if c.name in open_keys and c.verdict is Verdict.IMPROVEMENT]
        # With nothing slower or faster, no line of the output calls for an A/B that cannot
        # run.
        if slower_keys or (faster and why != NO_CONFIRM):
            return not_run(result.baseline, why, [*slower_keys, *faster])
        return None
    keys = [*slower_keys, *open_keys]
    if not keys:
        return None
    chosen = confirm_plan.plan([c for c in result.comparisons if c.name in keys],
                               result.baseline, result.candidate, budget_s,
                               design=sequential.Design(alpha=result.options.alpha),
                               family_size=len(keys),
                               slower_undecided=frozenset(slower_undecided(result)))
    first_looks = confirm_plan.schedule(chosen)
    # A regression is named: each candidate decided alone is tested at alpha / M, M counting
    # every candidate (Bonferroni, as the plan assumed when it costed them; the A/B splits
    # its alpha over those it is given), and the family at the shares of its L members,
    # alpha L / M (`gate.family`). Clearing is one claim about them all (none is past the
    # threshold), tested at the unsplit alpha (`sequential`, Clearing).
    options = dataclasses.replace(result.options, normalize=False,
                                  alpha=result.options.alpha * len(first_looks) / len(keys))
    return Request(commit=result.baseline.commit_info["id"], slower=tuple(slower_keys),
                   undecided=tuple(open_keys), plan=chosen, first_looks=first_looks,
                   options=options, clearing_alpha=result.options.alpha, budget_s=budget_s)


def _together(asked: Request, pairing: Mapping | None,
              judged: dict[str, Comparison]) -> Family | None:
    """The family's members judged together on their pairs (`gate.family`), `judged`
    updated in place: a member named is a regression, one not named and not otherwise
    decided says so. What the confirmation records of the family; None without one."""
    chosen = asked.plan
    if not chosen.family:
        return None
    records = {r["name"]: r for r in (pairing or {}).get("benchmarks", ())
               if r["name"] in chosen.family}
    left = {name: r["left_family_at"] for name, r in records.items()
            if r.get("left_family_at")}
    for name, at in left.items():
        if name in judged:
            judged[name] = _decided_alone(asked, judged[name], records[name], at)
    stayed = [name for name in chosen.family if name not in left]
    level = chosen.family_level * len(stayed) / len(chosen.family)
    ratios = {name: sequential.log_ratios(r["baseline"], r["candidate"])
              for name, r in records.items()
              if name not in left and r["baseline"] and r["candidate"]}
    members = family.decide(ratios, {name: r["threshold"] for name, r in records.items()},
                            level, chosen.family_pairs) if ratios else {}
    for name in stayed:
        c, member = judged.get(name), members.get(name)
        if c is None:
            continue
        if member is None:
            if c.verdict is Verdict.REGRESSION:  # the A/B's Holm: the family's alpha, not its
                judged[name] = dataclasses.replace(c, verdict=Verdict.INCONCLUSIVE, reason=(
                    f"{c.reason}; a member of the family with too few pairs to be judged in "
                    "it"))
            continue
        words = (f"{len(members)} members, {member.pairs} pairs each, P_adj="
                 f"{member.p_adjusted:.2g} at alpha {level:.2g}")
        if member.regression:
            judged[name] = dataclasses.replace(
                c, verdict=Verdict.REGRESSION, ratio=member.ratio, ci_low=member.ci_low,
                ci_high=member.ci_high, p_value=member.p_adjusted,
                p_adjusted=member.p_adjusted, rounds_needed=None,
                reason=f"slower beyond +{c.threshold:.0%} with its family: a closed test "
                       f"of the slower benchmarks decided together ({words})")
        elif c.verdict is Verdict.REGRESSION:
            # Its pairs alone name no regression: their share of alpha is the family's.
            judged[name] = dataclasses.replace(
                c, verdict=Verdict.INCONCLUSIVE, reason=f"not named with its family ({words})")
        elif c.verdict is Verdict.INCONCLUSIVE and not c.reason.startswith("cleared"):
            judged[name] = dataclasses.replace(
                c, reason=f"{c.reason}; not named with its family ({words}): a subset that "
                          "holds it is not past the threshold")
    return Family(tuple(sorted(members)), chosen.family_pairs, level,
                  tuple(sorted(name for name, m in members.items() if m.regression)),
                  decided_alone=tuple(sorted(left)))


def _decided_alone(asked: Request, paired: Comparison, record: Mapping, at: int
                   ) -> Comparison:
    """A family member whose first `at` pairs pointed at a regression, so it left the family
    (`ab.focus.leaving_look`), judged alone on the pairs after them as the A/B judges a
    benchmark decided alone (its alpha, Holm over the benchmarks it paired, here the
    strictest step: the others count as unpaired): the pairs that chose it are never
    judged again. The family is then judged at the shares of those that stayed
    (`_together`). `paired`: the A/B's own verdict, on every pair."""
    name = record["name"]
    others = {f"{name} (another of the A/B's)#{i}": ((), ())
              for i in range(len(asked.first_looks) - 1)}
    pairs = {name: (record["baseline"][at:], record["candidate"][at:]), **others}
    c = sequential.judge_family(
        pairs, {k: record["threshold"] for k in pairs},
        sequential.Design(alpha=asked.options.alpha),
        clearing=sequential.Design(alpha=asked.clearing_alpha))[0]
    return dataclasses.replace(
        paired, verdict=c.verdict, ratio=c.ratio, ci_low=c.ci_low, ci_high=c.ci_high,
        p_value=c.p_value, p_adjusted=c.p_adjusted, rounds_needed=c.rounds_needed,
        n_pairs=c.n_pairs, reason=f"{c.reason}; decided alone on the pairs after the {at} "
                                  "that made it leave its family")


def _moved(result: GateResult, asked: Request, pairing: Mapping | None,
           judged: Mapping[str, Comparison]) -> HostMove | None:
    """The machine's move between the two runs, read from the candidates the A/B paired, and
    every candidate it did not decide (left out, or paired without a verdict) judged on its
    stored ratio over that move (`gate.host_move`); one with pairs of its own is judged on
    them too, against a move read without it, so its pairs are neither ignored nor counted
    twice. None without the residual noise between runs or enough readings."""
    residuals = result.noise.residuals if result.noise is not None else {}
    stored_ratios = {c.name: c.ratio for c in result.comparisons
                     if math.isfinite(c.ratio) and c.ratio > 0}
    thresholds = {c.name: c.threshold for c in result.comparisons}
    readings = {}
    for record in (pairing or {}).get("benchmarks", ()):
        name = record["name"]
        if name in judged and name in residuals and name in stored_ratios \
                and record["baseline"] and record["candidate"]:
            found = host_move.reading(name, stored_ratios[name], sequential.log_ratios(
                record["baseline"], record["candidate"]), residuals[name])
            if found is not None:
                readings[name] = found
    move = host_move.measure(list(readings.values()))
    if move is None:
        return None
    open_keys = [name for name in asked.keys if name in residuals and name in stored_ratios
                 and (name not in judged or judged[name].verdict is Verdict.INCONCLUSIVE)]
    cleared = {}
    for name in open_keys:
        own = readings.get(name)
        against = move if own is None else host_move.measure(
            [r for other, r in readings.items() if other != name])
        if against is None:
            continue
        found = host_move.clear(
            stored_ratios[name], residuals[name], against, thresholds[name],
            asked.clearing_alpha,
            paired=None if own is None else (own.paired, own.paired_variance))
        if found is not None:
            cleared[name] = found
    return HostMove(move.ratio, math.sqrt(move.tau2), move.readings, cleared,
                    beyond_control=result.host is not None and result.host.divided_out)


def conclude(result: GateResult, asked: Request, paired: GateResult, seconds: float
             ) -> Confirmation:
    """The confirmation from the A/B's verdicts on `asked`: those it paired (the family
    decided together), those the budget left out, with no pair, and the machine's move the
    pairs measured, which may clear those they did not decide."""
    judged = {c.name: c for c in paired.comparisons if c.n_pairs}
    together = _together(asked, paired.pairing, judged)
    return Confirmation(
        Status.RAN, against=asked.commit, baseline=run_stamp(result.baseline),
        benchmarks=tuple(judged), left=tuple(name for name in asked.keys if name not in judged),
        undecided=asked.undecided, alpha=asked.options.alpha, seconds=round(seconds, 1),
        summary=summary_line(paired), comparisons=tuple(judged.values()), family=together,
        host_move=_moved(result, asked, paired.pairing, judged))


def settle(result: GateResult, confirmation: Confirmation | None) -> GateResult:
    """The screened `result` with its verdicts as `confirmation` settles them (None: as the
    stored runs left them)."""
    if confirmation is None:
        return result
    return dataclasses.replace(
        result, comparisons=stored.settle_by(result.comparisons, confirmation),
        confirmation=confirmation)


def judge(baseline: Run, candidate: Run, options: GateOptions | None = None,
          history: Sequence[Run] = (), *, pair: PairRunner | None = None,
          budget_s: float | None = None) -> GateResult:
    """Every verdict on `candidate` against `baseline`, the steps above in order; `UserError`
    when they cannot be compared. `pair`: the suite's paired A/B, which confirms the stored
    verdicts within `budget_s` (None: --no-confirm); without it, the confirmation saved with
    `candidate` when the suite judged it against this very baseline, if any."""
    screened = screen_runs(baseline, candidate, options, history)
    if pair is None:
        return settle(screened, recorded(baseline, candidate)
                      if screened.judged is Judged.STORED else None)
    return confirm(screened, pair, budget_s)


def confirm(screened: GateResult, pair: PairRunner, budget_s: float | None) -> GateResult:
    """Steps 2 to 6 on a screened result: what it asks of a paired A/B, the A/B (`pair`),
    and the verdicts it settles; `screened` itself when nothing calls for one."""
    asked = request(screened, budget_s)
    if not isinstance(asked, Request):
        return settle(screened, asked)
    started = time.monotonic()
    try:
        paired = pair(asked)
    except UserError as exc:
        return settle(screened, not_run(screened.baseline, f"the paired A/B failed: {exc}",
                                        asked.keys))
    return settle(screened, conclude(screened, asked, paired, time.monotonic() - started))


def compare_runs(baseline: Run, candidate: Run, options: GateOptions | None = None,
                 history: Sequence[Run] = ()) -> GateResult:
    """Two saved runs judged as the suite judged them (`judge` with no A/B of its own): what
    `llmbench compare`, `report` and the dashboard show."""
    return judge(baseline, candidate, options, history)
