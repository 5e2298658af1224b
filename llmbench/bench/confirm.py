"""Confirm before condemning: a stored comparison's slower benchmarks settled by a paired A/B.

A stored comparison sees two runs minutes or days apart; a benchmark slower in that pair may
be the machine, and a run disturbed by other work beside it can be several times slower on a
few benchmarks, beyond any noise measured between quiet runs. So no stored verdict fails a
run by itself. When the two runs measured different code and the baseline's commit is in
this repository, the suite's gate re-measures the slower benchmarks as `llmbench ab` does:
the baseline's commit in a temporary worktree against the working tree, one round each in
turn, judged sequentially within `--confirm-budget` (wall time, both sides' start included),
the stored regressions first (`confirm_plan`), and further passes over those left out while
the budget lasts. Each pass focuses (`ab.focus`): one decided regression fails the run, so a
benchmark whose pairs already point at a regression may take the rest of the budget rather
than its equal share, with which a slowdown just past the threshold is often left undecided.
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
from llmbench.gate import GateResult, stored, summary_line
from llmbench.gate.stats import Comparison, Verdict


def to_confirm(result: GateResult) -> list[str]:
    """The benchmarks slower in the stored runs (regression or not confirmed): every one is
    confirmed before it fails the gate."""
    if result.code is None or result.same_code:
        return []
    return [c.name for c in result.comparisons
            if c.verdict in (Verdict.REGRESSION, Verdict.NOT_CONFIRMED)]


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
        result = dataclasses.replace(result, comparisons=stored.unconfirmed(
            result.comparisons, keys, f"none could run: {why}"))
    return dataclasses.replace(result, confirmation={
        "status": "not run", "why": why, "against": commit,
        "baseline": stored.run_stamp(result.baseline), "benchmarks": list(keys)})


def confirm(result: GateResult, *, pytest_args: Sequence[str], budget_s: float | None,
            repo: str = ".", log: TextIO | None = None,
            disturbed_share: float | None = None) -> GateResult:
    """`result` with its slower benchmarks settled by a paired A/B against the baseline's
    commit (`budget_s` None: --no-confirm), or with why none ran."""
    keys = to_confirm(result)
    if not keys:
        return result
    if budget_s is None:
        return _not_run(result, stored.NO_CONFIRM, keys)
    if (why := why_not(result)) is not None:
        return _not_run(result, why, keys)
    from llmbench.ab import run_ab  # git worktrees and worker processes: only now

    commit = result.baseline.commit_info["id"]
    slower = [c for c in result.comparisons if c.name in keys]
    chosen = confirm_plan.plan(slower, result.baseline, result.candidate, budget_s)
    started = time.monotonic()
    judged: dict[str, Comparison] = {}
    tested: list[str] = []
    summaries: list[str] = []
    alphas: list[float] = []
    failed: dict = {}
    while True:
        _say_pass(log, chosen, len(keys), commit, budget_s - (time.monotonic() - started),
                  first=not tested)
        # A regression is named: each pass tests its share of the candidates at its share
        # of alpha, so every pass together holds the family's error rate (Bonferroni over
        # all the candidates, as the plan assumed when it costed them). Clearing is one
        # claim about them all (none is past the threshold), tested at the unsplit alpha
        # (`sequential`, Clearing).
        options = dataclasses.replace(result.options, normalize=False,
                                      alpha=result.options.alpha * len(chosen.chosen)
                                      / len(keys))
        alphas.append(options.alpha)
        try:
            paired = run_ab(commit, budget_s=budget_s - (time.monotonic() - started),
                            pytest_args=[*pytest_args, *chosen.chosen], options=options,
                            repo=repo, candidate_args=injected_args(result.candidate), log=log,
                            focus=True, disturbed_share=disturbed_share,
                            clearing_alpha=result.options.alpha)
        except UserError as exc:
            if not tested:
                return _not_run(result, f"the paired A/B failed: {exc}", keys)
            # A later pass that fails leaves what the earlier ones decided; its candidates
            # stay not confirmed, and say why.
            if log is not None:
                print(f"llmbench: the further A/B failed ({exc}); its benchmarks stay not "
                      "confirmed", file=log, flush=True)
            failed = {"why": str(exc), "benchmarks": list(chosen.chosen)}
            left = list(chosen.left)
            break
        judged.update((c.name, c) for c in paired.comparisons)
        tested += chosen.chosen
        summaries.append(summary_line(paired))
        left = list(chosen.left)
        again = confirm_plan.another_pass(
            [c for c in slower if c.name in left], result.baseline, result.candidate,
            budget_s - (time.monotonic() - started), family=len(keys)) if left else None
        if again is None:
            break
        chosen = again
    confirmation = {"status": "ran", "against": commit,
                    "baseline": stored.run_stamp(result.baseline),
                    "benchmarks": tested, "left": left, "passes": len(summaries),
                    "alphas": alphas, "seconds": round(time.monotonic() - started, 1),
                    "summary": " | ".join(summaries),
                    "comparisons": [stored.comparison_json(c) for c in judged.values()]}
    if failed:
        confirmation["failed"] = failed
    comparisons = _left_out(stored.settle(result.comparisons, judged), left, commit)
    return dataclasses.replace(
        result, comparisons=stored.apply_recorded(comparisons, confirmation, settled=True),
        confirmation=confirmation)


def _say_pass(log: TextIO | None, chosen: confirm_plan.Plan, candidates: int, commit: str,
              budget_s: float, first: bool) -> None:
    if log is None:
        return
    left = (f"; {len(chosen.left)} more not confirmed unless time is left over for them"
            if chosen.left else "")
    # A line of its own: pytest's progress line may not have ended yet.
    print(f"\nllmbench: confirming {len(chosen.chosen)} of {candidates} slower "
          f"benchmark(s), stored regressions first, then cheapest to decide, by a paired "
          f"A/B against {commit[:8]}, within {budget_s:.0f} s{left}" if first else
          f"\nllmbench: {budget_s:.0f} s of the budget left: a further paired A/B of "
          f"{len(chosen.chosen)} benchmark(s) it left out{left}", file=log, flush=True)


def _left_out(comparisons, left: Sequence[str], commit: str):
    """The candidates the budget left out say why and how to decide them (a stored regression
    among them is then made "not confirmed" by `unconfirmed`)."""
    out = []
    for c in comparisons:
        if c.name in left:
            c = dataclasses.replace(c, reason=(
                f"{c.reason}; not re-measured: the confirmation's budget went to stored "
                f"regressions first, then to the slower benchmarks cheapest to decide "
                f"(`llmbench ab {commit[:8]} -- -k ...` decides it)"))
        out.append(c)
    return tuple(out)
