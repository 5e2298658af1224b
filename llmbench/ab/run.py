"""A/B mode: a git revision against the working tree, on the same machine at the same time.

A stored baseline was measured minutes or days ago, on a machine whose speed has drifted
since (on a shared machine, separate runs of the same code land further apart than the
gate's thresholds; figures: docs/measurements/2026-11-29-stored-and-block-ab.md). A/B
mode removes the drift instead of modelling it. REV is checked out into a temporary `git
worktree`, and its benchmark suite (the baseline) and the working tree's (the candidate)
run as two long-lived processes that take turns one round at a time (`judge_in_turn`, see
`pairing`): each benchmark is judged on its pairs of rounds, measured seconds apart, by a
group-sequential test within a time budget.

Each side imports llmbench from its own checkout: the run's cwd is that checkout and it
comes first on PYTHONPATH (ahead of the editable install). This is checked before timing
anything, and each baseline run's recorded commit against REV afterwards.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

from llmbench import runs
from llmbench.ab.checkout import (
    ABError,
    Checkout,
    check_commit,
    check_pytest_args,
    repo_root,
    worktree,
)
from llmbench.gate import stats
from llmbench.gate.compare import GateOptions, GateResult, compare_paired

DEFAULT_BUDGET_S = 600.0  # paired: ten minutes fits the quick selection on a 2-core CPU


class BudgetSpent(ABError):
    """The budget ended before any benchmark had a timed pair: both sides ran, nothing was
    measured (too short a budget, not a broken side)."""


def live_threshold(options: GateOptions, nodeid: str, group: str | None,
                   device_option: str | None) -> float:
    """A benchmark's threshold while pairing, before any run is saved: as `compare` resolves
    it (benchmark > group > --threshold > the device's default)."""
    name = nodeid.rsplit("::", 1)[-1]
    for key in (nodeid, name, group):
        if key is not None and key in options.threshold_for:
            return options.threshold_for[key]
    if options.threshold is not None:
        return options.threshold
    from llmbench.engine.device import resolve_device  # torch: only when a default is needed

    return stats.DEFAULT_THRESHOLDS[resolve_device(device_option or "auto").type]


def run_ab(rev: str, *, budget_s: float = DEFAULT_BUDGET_S, max_pairs: int | None = None,
           pytest_args: Sequence[str] = (), options: GateOptions | None = None,
           keep: str | None = None, repo: str | os.PathLike = ".",
           candidate_args: Sequence[str] = (), log: TextIO | None = None,
           on_interrupt=None, focus: bool = False,
           disturbed_share: float | None = None,
           clearing_alpha: float | None = None,
           schedule: Mapping[str, float] | None = None,
           candidate_rev: str | None = None) -> GateResult:
    """`llmbench ab REV`: REV's suite against the working tree's (or, given `candidate_rev`,
    that revision's, in a worktree of its own), paired round by round within `budget_s`
    (`pairing`). `focus`: a benchmark whose pairs point at a regression may
    take the rest of the budget (`focus`), for a confirmation, which needs one decided
    regression, not every verdict. A pair in which others took more than `disturbed_share`
    of a side's CPUs is taken again. `clearing_alpha` (a confirmation's unsplit alpha): a
    benchmark whose pairs rule out a regression at that level stops, cleared (`sequential`,
    Clearing). `schedule` (a confirmation's): the benchmarks' order and the time reserved for
    each (`shares`)."""
    from llmbench.gate import sequential

    check_pytest_args(pytest_args)
    options = options or GateOptions()
    design = sequential.Design(alpha=options.alpha,
                               max_pairs=max_pairs or sequential.DEFAULT_MAX_PAIRS)
    clearing = (None if clearing_alpha is None else
                sequential.Design(alpha=clearing_alpha, max_pairs=design.max_pairs))
    if options.normalize:
        raise ABError("--normalize does not apply to a paired A/B: each pair already shares "
                      "its moment on the machine; drop it")
    root = repo_root(repo)
    if keep is not None:
        _check_keep(Path(keep))
    with contextlib.ExitStack() as stack:
        workdir = Path(keep) if keep else Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="llmbench-ab-runs-")))
        source, sha = stack.enter_context(worktree(root, rev))
        baseline = Checkout("baseline", source, commit=sha)
        if candidate_rev is None:
            candidate = Checkout("candidate", root, tuple(candidate_args))
            told = f"the working tree {root}"
        else:
            where, commit = stack.enter_context(worktree(root, candidate_rev, "candidate"))
            candidate = Checkout("candidate", where, tuple(candidate_args), commit=commit)
            told = f"{candidate_rev} ({commit[:8]}) in {where}"
        if log is not None:
            print(f"llmbench ab: baseline {rev} ({sha[:8]}) in {source}; candidate: "
                  f"{told}; paired rounds, budget {budget_s:.0f} s, at most "
                  f"{design.max_pairs} pairs a benchmark", file=log)
        return judge_in_turn(baseline, candidate, pytest_args=pytest_args, workdir=workdir,
                             design=design, budget_s=budget_s, options=options, log=log,
                             on_interrupt=on_interrupt, focus=focus,
                             disturbed_share=disturbed_share, clearing=clearing,
                             schedule=schedule)


def _check_keep(folder: Path) -> None:
    """--keep must name a new or empty folder both sides' runs can be saved in: said before
    any suite starts."""
    if folder.exists() and not folder.is_dir():
        raise ABError(f"--keep {folder}: that is a file, not a folder; pass a new folder")
    if folder.is_dir() and any(folder.iterdir()):
        raise ABError(f"--keep {folder}: the folder is not empty; pass a new one")
    try:
        runs.check_writable(folder)
    except runs.RunError as exc:
        raise ABError(f"--keep: {exc}; pass another folder") from None


def judge_in_turn(baseline: Checkout, candidate: Checkout, *, pytest_args: Sequence[str],
                  workdir: Path, design, budget_s: float, options: GateOptions,
                  log: TextIO | None = None, on_interrupt=None,
                  focus: bool = False, disturbed_share: float | None = None,
                  clearing=None, schedule: Mapping[str, float] | None = None) -> GateResult:
    """Pair two checkouts' suites round by round (`pairing`) and judge the pairs."""
    from llmbench.ab import pairing

    paired = pairing.run_paired(
        baseline, candidate, pytest_args=pytest_args, workdir=workdir, design=design,
        budget_s=budget_s, log=log, on_interrupt=on_interrupt, focus=focus,
        disturbed_share=disturbed_share, clearing=clearing, schedule=schedule,
        threshold_of=lambda nodeid, group, device: live_threshold(options, nodeid, group,
                                                                  device))
    # A benchmark with no timed pair (the budget was spent before its turn, or before its
    # warm-up rounds were over) is in neither saved run; the verdict lists it unpaired.
    unpaired = {r["name"]: r["threshold"] for r in paired.pairing["benchmarks"]
                if not (r["baseline"] and r["candidate"])}
    if len(unpaired) == len(paired.pairing["benchmarks"]):
        raise BudgetSpent(f"the budget ({budget_s:.0f} s) was spent before any benchmark had "
                          "a timed pair: pass a longer --budget")
    base, cand = runs.load_run(paired.baseline), runs.load_run(paired.candidate)
    for run, side in ((base, baseline), (cand, candidate)):
        check_commit(run, side)
    for record in paired.pairing["benchmarks"]:  # the saved runs are the pairs, exactly
        if record["name"] in unpaired:
            continue
        for run, side in ((base, "baseline"), (cand, "candidate")):
            saved = run.benchmarks.get(record["name"])
            if saved is None or list(saved.samples) != record[side]:
                raise ABError(f"{side} run {run.source} does not hold the rounds paired "
                              f"for {record['name']}")
    result = compare_paired(base, cand, design, options, unpaired=unpaired, clearing=clearing)
    # A benchmark one side lacks is in neither saved run: it was never paired.
    only = paired.pairing["only"]
    return dataclasses.replace(result, pairing=paired.pairing,
                               only_baseline=(*result.only_baseline, *only["baseline"]),
                               only_candidate=(*result.only_candidate, *only["candidate"]))
