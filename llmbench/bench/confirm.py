"""Confirm before condemning: a stored comparison's slower benchmarks settled by a paired A/B.

A stored comparison sees two runs minutes or days apart; a benchmark slower in that pair may
be the machine, and a run disturbed by other work beside it can be several times slower on a
few benchmarks, beyond any noise measured between quiet runs. So no stored verdict fails a
run by itself. When the two runs measured different code and the baseline's commit is in
this repository, the suite's gate re-measures the slower benchmarks as `llmbench ab` does:
the baseline's commit in a temporary worktree against the working tree, one round each in
turn, judged sequentially within `--confirm-budget` (wall time, both sides' start included),
every candidate in one A/B, the stored regressions first, then the cheapest to decide, each
with the time of its first deciding look reserved (`gate.confirm_plan`, `ab.shares`). The slower
benchmarks the budget cannot decide alone (a slowdown in the decode loop makes two dozen
slower) are decided together: each takes the same few pairs, and a closed test over them
names each one whose every subset is past the threshold (`gate.family`). It
focuses (`ab.focus`): one decided regression fails the run, so a benchmark whose pairs
already point at a regression may take the rest of the budget rather than its share, with
which a slowdown just past the threshold is often left undecided. What the budget leaves
after the slower benchmarks goes to those the stored runs could not decide either way
(`undecided`): the drift between runs hides a slowdown as readily as it fakes one.
The A/B's verdicts replace the stored ones (`gate.stored.settle_by`). A slower benchmark the
A/B did not decide, whether the budget left it out or the pairs could not settle it, is "not
confirmed" (exit 6): neither a pass nor a regression. Where no A/B can reproduce the two
runs (no git, the commit is gone, the baseline ran uncommitted changes or a slowdown
injected on top, the library versions differ, an external server was measured), the
comparison says why and its slower benchmarks are "not confirmed" too. Only `--no-confirm`
leaves the stored verdicts as they are: a regression beyond the measured noise between runs
then fails the run unconfirmed.

What to confirm, the plan, the family and the verdicts are the gate's (`gate.pipeline`);
this module runs the one step that starts processes: the paired A/B of a `gate.Request`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from llmbench import runs
from llmbench.gate import GateResult, Request


def injected_args(run: runs.Run) -> list[str]:
    """The pytest arguments that inject the same slowdowns a run recorded."""
    slowed = runs.injected_slowdowns(run)
    if not slowed:
        return []
    args = ["-p", "llmbench.bench.inject"]
    for name, factor in sorted(slowed.items()):
        args.append(f"--slow-down={name}={factor}")
    return args


def runner(candidate: runs.Run, *, pytest_args: Sequence[str], repo: str = ".",
           log: TextIO | None = None, disturbed_share: float | None = None):
    """The paired A/B that `gate.pipeline.judge` hands a confirmation's `Request`: the
    baseline's commit in a worktree against the working tree (with the slowdowns `candidate`
    was measured under), on the request's schedule, within its budget."""
    def pair(asked: Request) -> GateResult:
        from llmbench.ab import run_ab, shares  # git worktrees and worker processes: only now

        schedule = shares.Schedule(asked.first_looks, asked.unreserved,
                                   frozenset(asked.plan.family), asked.plan.family_pairs)
        _say(log, asked, len(schedule) - len(schedule.unreserved), len(schedule.unreserved))
        return run_ab(asked.commit, budget_s=asked.budget_s,
                      pytest_args=[*pytest_args, *schedule], options=asked.options, repo=repo,
                      candidate_args=injected_args(candidate), log=log, focus=True,
                      disturbed_share=disturbed_share, clearing_alpha=asked.clearing_alpha,
                      schedule=schedule)
    return pair


def _say(log: TextIO | None, asked: Request, scheduled: int, undecided: int) -> None:
    if log is None:
        return
    chosen, slower = asked.plan, len(asked.slower)
    # Those the stored runs show slower within the threshold are scheduled with the slower
    # ones (`confirm_plan`), though they stay undecided (`Request.undecided`).
    reserved = sum(name in chosen.estimates for name in asked.slower)
    shown = scheduled - reserved
    slower_words = [f"{reserved} of {slower} slower benchmark(s)" if slower else "",
                    f"{shown} shown slower within the threshold" if shown else ""]
    what = " and ".join(w for w in slower_words if w)
    if what:
        what += ", stored regressions first, then cheapest to decide"
    if undecided:
        what += (f"{', then ' if what else ''}{undecided} the stored runs could not "
                 "decide, on what is left")
    together = (f"; {len(chosen.family)} the budget cannot decide alone are decided "
                f"together, {chosen.family_pairs} pairs each" if chosen.family else "")
    # A line of its own: pytest's progress line may not have ended yet.
    print(f"\nllmbench: confirming {what}, by a paired A/B against {asked.commit[:8]} within "
          f"{asked.budget_s:.0f} s{together}; the budget is expected to decide "
          f"{len(chosen.chosen) + len(set(chosen.family) - set(chosen.left))}, the rest while "
          "time is left", file=log, flush=True)
