"""Confirm before condemning: a stored comparison's slower benchmarks settled by a paired A/B.

A stored comparison sees two runs minutes or days apart; a benchmark slower in that pair may
be the machine. When the two runs measured different code and the baseline's commit is in
this repository, the suite's gate re-measures exactly those benchmarks as `llmbench ab` does:
the baseline's commit in a temporary worktree against the working tree, one round each in
turn, judged sequentially within `--confirm-budget`. The A/B's verdicts replace the stored
ones (`gate.stored.settle`); one it cannot decide within the budget stays not confirmed. Where no A/B can run (no git, the commit is gone, the baseline
ran uncommitted changes), the comparison says why and its slower benchmarks stay "not
confirmed" (exit 6), neither a pass nor a regression.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import TextIO

from llmbench import runs
from llmbench.errors import UserError
from llmbench.gate import GateResult, stored, summary_line
from llmbench.gate.stats import Verdict


def to_confirm(result: GateResult) -> list[str]:
    """The benchmarks slower in the stored runs (regression or not confirmed): every one is
    confirmed before it fails the gate."""
    if result.code is None or result.same_code:
        return []
    return [c.name for c in result.comparisons
            if c.verdict in (Verdict.REGRESSION, Verdict.NOT_CONFIRMED)]


def why_not(result: GateResult) -> str | None:
    """Why no paired A/B can reproduce the baseline's code; None when one can."""
    code = runs.code_of(result.baseline)
    if not code.commit:
        return "the baseline run recorded no commit (it was not run from a git checkout)"
    if code.dirty:
        return (f"the baseline ran uncommitted changes on {code.commit[:8]}, which no checkout "
                "can reproduce")
    return None


def injected_args(run: runs.Run) -> list[str]:
    """The pytest arguments that inject the same slowdowns a run recorded."""
    slowed = (run.injected or {}).get("slow_down") or {}
    if not slowed:
        return []
    args = ["-p", "llmbench.bench.inject"]
    for name, factor in sorted(slowed.items()):
        args.append(f"--slow-down={name}={factor}")
    return args


def _not_run(result: GateResult, why: str, keys: Sequence[str]) -> GateResult:
    commit = (result.baseline.commit_info.get("id") or "")[:8]
    return dataclasses.replace(result, confirmation={
        "status": "not run", "why": why, "against": commit,
        "baseline": stored.run_stamp(result.baseline), "benchmarks": list(keys)})


def confirm(result: GateResult, *, pytest_args: Sequence[str], budget_s: float | None,
            repo: str = ".", log: TextIO | None = None) -> GateResult:
    """`result` with its slower benchmarks settled by a paired A/B against the baseline's
    commit (`budget_s` None: --no-confirm), or with why none ran."""
    keys = to_confirm(result)
    if not keys:
        return result
    if budget_s is None:
        return _not_run(result, "--no-confirm", keys)
    if (why := why_not(result)) is not None:
        return _not_run(result, why, keys)
    from llmbench.ab import run_ab  # git worktrees and worker processes: only now

    commit = result.baseline.commit_info["id"]
    # Nothing of this run's own injection goes to the baseline: it ran its commit as is.
    base_injection = injected_args(result.baseline)
    if base_injection:
        return _not_run(result, "the baseline ran with an injected slowdown", keys)
    if log is not None:
        # A line of its own: pytest's progress line may not have ended yet.
        print(f"\nllmbench: confirming {len(keys)} slower benchmark(s) by a paired A/B against "
              f"{commit[:8]}, within {budget_s:.0f} s", file=log, flush=True)
    started = time.monotonic()
    try:
        paired = run_ab(commit, budget_s=budget_s, pytest_args=[*pytest_args, *keys],
                        options=dataclasses.replace(result.options, normalize=False),
                        repo=repo, candidate_args=injected_args(result.candidate), log=log)
    except UserError as exc:
        return _not_run(result, f"the paired A/B failed: {exc}", keys)
    judged = {c.name: c for c in paired.comparisons}
    return dataclasses.replace(
        result, comparisons=stored.settle(result.comparisons, judged),
        confirmation={"status": "ran", "against": commit,
                      "baseline": stored.run_stamp(result.baseline), "benchmarks": list(keys),
                      "seconds": round(time.monotonic() - started, 1),
                      "summary": summary_line(paired),
                      "comparisons": [stored.comparison_json(c) for c in paired.comparisons]})
