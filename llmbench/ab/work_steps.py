"""Counted work per commit, for `llmbench bisect --work`.

Counted work (aten ops, FLOPs, bytes of one untimed round: `llmbench.gate.work`) is exact,
so a commit needs one measurement and no pairing: its suite runs once in a worktree of its
own with one round per case, saving its counts (`--save-work-reference`), and a step
compares two commits' counts case by case under the gate's rule. Each commit is counted
once; the counts are kept in the bisection (`Bisection.counts`), so a rerun counts nothing
twice.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import MutableMapping, Sequence
from pathlib import Path

from llmbench.ab.checkout import ABError, Checkout, check_imports, side_env, worktree
from llmbench.gate.work import WorkStatus, judge_work
from llmbench.history.bisection import NOT_SLOWER, SKIPPED, SLOWER

# One round per case is enough: the counts come from an untimed round of their own.
COUNT_ARGS = ("--benchmark-only", "--rounds=1", "--warmup-rounds=0", "--no-save", "-q",
              "-p", "no:cacheprovider")


def count_work(root: Path, commit: str, pytest_args: Sequence[str]) -> dict[str, dict]:
    """Each selected case's counts at `commit`, by one run of its suite in a worktree."""
    with worktree(root, commit, "work") as (path, sha), tempfile.TemporaryDirectory(
            prefix="llmbench-work-") as out:
        side = Checkout("work", path, commit=sha)
        check_imports(side)
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", *pytest_args, *COUNT_ARGS,
             f"--save-work-reference={out}"],
            cwd=path, env=side_env(side), capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
            raise ABError(f"its suite failed (pytest exit {proc.returncode}): "
                          + " | ".join(tail))
        saved = sorted(Path(out).glob("*.json"))
        if len(saved) != 1:
            raise ABError("its suite saved no counted work (a commit from before counted "
                          "work, or a selection without cases)")
        return json.loads(saved[0].read_text("utf-8"))["benchmarks"]


def work_judge(root: Path, pytest_args: Sequence[str], threshold: float,
               counted: MutableMapping[str, dict]):
    """A bisect `Judge` on counted work: more work beyond `threshold` on any watched case
    (every case for the first step) is "slower". `counted` holds each commit's counts,
    filled as commits are counted."""
    def counts(commit: str, watched: tuple[str, ...]) -> dict[str, dict]:
        have = counted.get(commit, {})
        if not have or any(name not in have for name in watched):
            counted[commit] = {**have, **count_work(root, commit, [*pytest_args, *watched])}
        return counted[commit]

    def judge(baseline: str, commit: str, watched: tuple[str, ...], share: float):
        base, cand = counts(baseline, watched), counts(commit, watched)
        names = watched or tuple(sorted(set(base) & set(cand)))
        missing = [name for name in names if name not in cand]
        if missing:
            return SKIPPED, (), f"it has no {', '.join(missing)}"
        if not names:
            return SKIPPED, (), "it shares no counted case with its baseline"
        findings = [judge_work(name, {"work": base[name]}, {"work": cand[name]}, threshold)
                    for name in names]
        benchmarks = tuple({"name": f.name, "label": f.name.rsplit("::", 1)[-1],
                            "verdict": f.status.value, "summary": f.describe()}
                           for f in findings)
        worse = any(f.status is WorkStatus.MORE for f in findings)
        return (SLOWER if worse else NOT_SLOWER), benchmarks, ""

    return judge
