"""Confirm before condemning: a stored comparison's slower benchmarks settled by a paired A/B.

A stored comparison sees two runs minutes or days apart; a benchmark slower in that pair may
be the machine, and a run disturbed by other work beside it can be several times slower on a
few benchmarks, beyond any noise measured between quiet runs. So no stored verdict fails a
run by itself. When the two runs measured different code and the baseline's commit is in
this repository, the suite's gate re-measures the slower benchmarks as `llmbench ab` does:
the baseline's commit in a temporary worktree against the working tree, one round each in
turn, judged sequentially within `--confirm-budget` (wall time, both sides' start included),
every candidate in one A/B, the stored regressions first, then the cheapest to decide, each
with the time of its first deciding look reserved (`confirm_plan`, `ab.shares`). The slower
benchmarks the budget cannot decide alone (a slowdown in the decode loop makes two dozen
slower) are decided together: each takes the same few pairs, and a closed test over them
names each one whose every subset is past the threshold (`gate.family`). It
focuses (`ab.focus`): one decided regression fails the run, so a benchmark whose pairs
already point at a regression may take the rest of the budget rather than its share, with
which a slowdown just past the threshold is often left undecided. What the budget leaves
after the slower benchmarks goes to those the stored runs could not decide either way
(`undecided`): the drift between runs hides a slowdown as readily as it fakes one.
The A/B's verdicts replace the stored ones (`gate.stored.settle`). A slower benchmark the
A/B did not decide, whether the budget left it out or the pairs could not settle it, is "not
confirmed" (exit 6): neither a pass nor a regression. Where no A/B can reproduce the two
runs (no git, the commit is gone, the baseline ran uncommitted changes or a slowdown
injected on top, the library versions differ, an external server was measured), the
comparison says why and its slower benchmarks are "not confirmed" too. Only `--no-confirm`
leaves the stored verdicts as they are: a regression beyond the measured noise between runs
then fails the run unconfirmed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import TextIO

from llmbench import runs
from llmbench.bench import confirm_plan
from llmbench.errors import UserError
from llmbench.gate import GateResult, family, sequential, stored, summary_line
from llmbench.gate.sequential import Design
from llmbench.gate.stats import Verdict


def to_confirm(result: GateResult) -> list[str]:
    """The benchmarks slower in the stored runs (regression or not confirmed): every one is
    confirmed before it fails the gate."""
    if result.code is None or result.same_code:
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
    if result.code is None or result.same_code:
        return []
    return [c.name for c in result.comparisons
            if c.verdict in (Verdict.INCONCLUSIVE, Verdict.IMPROVEMENT)]


def why_not(result: GateResult) -> str | None:
    """Why no paired A/B can reproduce what the two runs measured; None when one can. Both
    sides of an A/B run the libraries installed now, so versions must be the same."""
    base, cand = runs.code_of(result.baseline), runs.code_of(result.candidate)
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


def injected_args(run: runs.Run) -> list[str]:
    """The pytest arguments that inject the same slowdowns a run recorded."""
    slowed = runs.injected_slowdowns(run)
    if not slowed:
        return []
    args = ["-p", "llmbench.bench.inject"]
    for name, factor in sorted(slowed.items()):
        args.append(f"--slow-down={name}={factor}")
    return args


def _not_run(result: GateResult, why: str, keys: Sequence[str]) -> GateResult:
    commit = (result.baseline.commit_info.get("id") or "")[:8]
    if why != stored.NO_CONFIRM:
        result = dataclasses.replace(result, comparisons=stored.unsettled(
            result.comparisons, keys, f"none could run: {why}"))
    return dataclasses.replace(result, confirmation={
        "status": "not run", "why": why, "against": commit,
        "baseline": stored.run_stamp(result.baseline), "benchmarks": list(keys)})


def confirm(result: GateResult, *, pytest_args: Sequence[str], budget_s: float | None,
            repo: str = ".", log: TextIO | None = None,
            disturbed_share: float | None = None) -> GateResult:
    """`result` with its slower benchmarks settled by a paired A/B against the baseline's
    commit (`budget_s` None: --no-confirm), or with why none ran."""
    slower_keys = to_confirm(result)
    why = stored.NO_CONFIRM if budget_s is None else why_not(result)
    open_keys = undecided(result)
    if why is not None:
        faster = [c.name for c in result.comparisons
                  if c.name in open_keys and c.verdict is Verdict.IMPROVEMENT]
        # With nothing slower or faster, no line of the output calls for an A/B that cannot
        # run.
        return _not_run(result, why, [*slower_keys, *faster]) if slower_keys or (
            faster and why != stored.NO_CONFIRM) else result
    keys = [*slower_keys, *open_keys]
    if not keys:
        return result
    from llmbench.ab import run_ab, shares  # git worktrees and worker processes: only now

    commit = result.baseline.commit_info["id"]
    candidates = [c for c in result.comparisons if c.name in keys]
    chosen = confirm_plan.plan(candidates, result.baseline, result.candidate, budget_s,
                               design=Design(alpha=result.options.alpha),
                               family_size=len(keys))
    first_looks = confirm_plan.schedule(chosen)
    schedule = shares.Schedule(first_looks, chosen.undecided & first_looks.keys(),
                               frozenset(chosen.family), chosen.family_pairs)
    _say(log, chosen, len(slower_keys), len(schedule) - len(schedule.unreserved),
         len(schedule.unreserved), commit, budget_s)
    # A regression is named: each candidate decided alone is tested at alpha / M, M counting
    # every candidate (Bonferroni, as the plan assumed when it costed them; the A/B splits
    # its alpha over those it is given), and the family at the shares of its L members,
    # alpha L / M (`gate.family`). Clearing is one claim about them all (none is past the
    # threshold), tested at the unsplit alpha (`sequential`, Clearing).
    tested = list(schedule)
    options = dataclasses.replace(result.options, normalize=False,
                                  alpha=result.options.alpha * len(tested) / len(keys))
    started = time.monotonic()
    try:
        paired = run_ab(commit, budget_s=budget_s, pytest_args=[*pytest_args, *tested],
                        options=options, repo=repo,
                        candidate_args=injected_args(result.candidate), log=log, focus=True,
                        disturbed_share=disturbed_share, clearing_alpha=result.options.alpha,
                        schedule=schedule)
    except UserError as exc:
        return _not_run(result, f"the paired A/B failed: {exc}", keys)
    # Those it reached after the deadline, or whose first look no longer fitted, have no
    # pair: the budget left them out.
    judged = {c.name: c for c in paired.comparisons if c.n_pairs}
    together = _together(chosen, paired.pairing, judged)
    left = [name for name in keys if name not in judged]
    confirmation = {"status": "ran", "against": commit,
                    "baseline": stored.run_stamp(result.baseline),
                    "benchmarks": list(judged), "left": left, "undecided": open_keys,
                    "alpha": options.alpha,
                    "seconds": round(time.monotonic() - started, 1),
                    "summary": summary_line(paired),
                    "comparisons": [stored.comparison_json(c) for c in judged.values()]}
    if together is not None:
        confirmation["family"] = together
    comparisons = _left_out(stored.settle(result.comparisons, judged), left, commit)
    return dataclasses.replace(
        result, comparisons=stored.apply_recorded(comparisons, confirmation, settled=True),
        confirmation=confirmation)


def _together(chosen: confirm_plan.Plan, pairing: dict | None, judged: dict) -> dict | None:
    """The family's members judged together on their pairs (`gate.family`), `judged`
    updated in place: a member named is a regression, one not named and not otherwise
    decided says so. What the confirmation records of the family; None without one."""
    if not chosen.family:
        return None
    records = {r["name"]: r for r in (pairing or {}).get("benchmarks", ())
               if r["name"] in chosen.family}
    ratios = {name: sequential.log_ratios(r["baseline"], r["candidate"])
              for name, r in records.items() if r["baseline"] and r["candidate"]}
    members = family.decide(ratios, {name: r["threshold"] for name, r in records.items()},
                            chosen.family_level, chosen.family_pairs)
    for name in chosen.family:
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
                 f"{member.p_adjusted:.2g} at alpha {chosen.family_level:.2g}")
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
    return {"benchmarks": sorted(members), "pairs": chosen.family_pairs,
            "alpha": chosen.family_level,
            "regression": sorted(name for name, m in members.items() if m.regression)}


def _say(log: TextIO | None, chosen: confirm_plan.Plan, slower: int, scheduled: int,
         undecided: int, commit: str, budget_s: float) -> None:
    if log is None:
        return
    what = (f"{scheduled} of {slower} slower benchmark(s), stored regressions first, then "
            "cheapest to decide" if slower else "")
    if undecided:
        what += (f"{', then ' if slower else ''}{undecided} the stored runs could not "
                 "decide, on what is left")
    together = (f"; {len(chosen.family)} the budget cannot decide alone are decided "
                f"together, {chosen.family_pairs} pairs each" if chosen.family else "")
    # A line of its own: pytest's progress line may not have ended yet.
    print(f"\nllmbench: confirming {what}, by a paired A/B against {commit[:8]} within "
          f"{budget_s:.0f} s{together}; the budget is expected to decide "
          f"{len(chosen.chosen) + len(set(chosen.family) - set(chosen.left))}, the rest while "
          "time is left", file=log, flush=True)


def _left_out(comparisons, left: Sequence[str], commit: str):
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
