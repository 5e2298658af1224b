"""`llmbench bisect GOOD BAD`: the first commit between two revisions whose benchmarks got
slower beyond the threshold, found by paired A/B (`run_ab`), never guessed from stored runs.

The commits are GOOD..BAD along first parents (the order a branch's history was merged
in), oldest first; with `all_parents`, every commit of the range, merged ones included. The
first step pairs GOOD against BAD on the selected benchmarks: those it finds slower are
watched from then on (later steps run only them), and when none is, the range holds no
slower commit and the bisection ends there. Each later step pairs GOOD against the open
commit that halves what is open, as `git bisect` picks it (by the commits each one
contains: along a chain, the middle one): slower on any watched benchmark, the culprit is
that commit or one it contains; not slower on every one (paired intervals that rule the
threshold out), one it does not contain. A step the A/B cannot
decide within its share of the budget is not guessed at: the bisection stops with the
range it had. A commit whose suite cannot run (it fails to import, lacks a watched
benchmark, or its suite fails) is skipped as `git bisect skip` does, and the open commit
that next best halves the rest is measured instead. When one commit is left, a last step pairs it
against its parent, so the result shows what that commit alone did.

Each step gets an equal share of what is left of the budget over the steps still expected.
Every step is saved as it ends, so an interruption loses at most the step it was in, and
running the same bisection again reuses every verdict already measured.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from llmbench import runs
from llmbench.ab.checkout import ABError, git, repo_root, resolve_rev
from llmbench.ab.run import BudgetSpent, run_ab
from llmbench.ab.work_steps import work_judge
from llmbench.errors import UserError
from llmbench.gate.compare import GateOptions, GateResult
from llmbench.gate.stats import Verdict
from llmbench.history import bisection as words
from llmbench.history.bisection import (
    FOUND,
    NARROWED,
    NONE_SLOWER,
    NOT_SLOWER,
    SKIPPED,
    SLOWER,
    STOPPED,
    UNDECIDED,
)

CLEARED = {Verdict.UNCHANGED, Verdict.IMPROVEMENT, Verdict.NOT_SLOWER}


@dataclass(frozen=True)
class Step:
    """One paired A/B: `commit` against `baseline` on `watched` (empty: every selected
    benchmark), what it decided, and each benchmark's verdict with its ratio and interval."""

    baseline: str
    commit: str
    watched: tuple[str, ...]
    outcome: str
    seconds: float
    benchmarks: tuple[dict, ...] = ()
    reason: str = ""
    kind: str = "time"  # "work": counted work compared, one suite run per commit

    @classmethod
    def from_dict(cls, saved: dict) -> Step:
        return cls(**{**saved, "watched": tuple(saved["watched"]),
                      "benchmarks": tuple(saved["benchmarks"])})

    @property
    def slower(self) -> tuple[str, ...]:
        """The benchmarks this step found slower (or doing more work)."""
        return words.slower_benchmarks(dataclasses.asdict(self))


@dataclass
class Bisection:
    """A bisection's arguments, commits, steps so far and, once ended, its answer."""

    good: str
    bad: str
    key: str  # what must match for a saved bisection's steps to be reused
    commits: tuple[str, ...]  # GOOD..BAD along first parents, oldest first; BAD last
    subjects: dict[str, str]
    steps: list[Step] = field(default_factory=list)
    answer: str | None = None
    culprit: str | None = None
    first_possible: str | None = None  # the range the culprit is known to lie in
    last_possible: str | None = None
    skipped: tuple[str, ...] = ()
    reason: str = ""
    watched: tuple[str, ...] = ()  # the benchmarks GOOD against BAD found slower
    parent: str | None = None  # the culprit's parent, which the last step paired it with
    kind: str = "time"  # "work": counted work, one suite run per commit, no pairing
    counts: dict[str, dict] = field(default_factory=dict)  # work: each commit's counts
    all_parents: bool = False  # every commit of the range, not only the first-parent line

    def _named(self) -> dict:
        """What naming a commit or a step needs of the saved document."""
        return {"good": self.good, "bad": self.bad, "subjects": self.subjects,
                "kind": self.kind}

    def name(self, sha: str) -> str:
        return words.commit_name(self._named(), sha, quote="")

    def step_line(self, step: Step) -> str:
        return words.step_line(self._named(), dataclasses.asdict(step))

    def find(self, baseline: str, commit: str, watched: tuple[str, ...],
             decided_only: bool = True) -> Step | None:
        """The newest step of `commit` against `baseline` on `watched`; an undecided or
        skipped one only when not `decided_only` (a new run measures it again: with its own
        share, or after what kept it from running was fixed)."""
        for step in reversed(self.steps):
            if (step.baseline, step.commit, step.watched) == (baseline, commit, watched) and (
                    not decided_only or step.outcome not in (UNDECIDED, SKIPPED)):
                return step
        return None

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "steps": [dataclasses.asdict(s) for s in self.steps]}

    @classmethod
    def from_dict(cls, saved: dict) -> Bisection:
        return cls(**{**saved, "commits": tuple(saved["commits"]),
                      "skipped": tuple(saved["skipped"]), "watched": tuple(saved["watched"]),
                      "steps": [Step.from_dict(s) for s in saved["steps"]]})


def default_output(good: str, bad: str, work: bool = False) -> Path:
    return Path(f"bisect-{'work-' if work else ''}{good[:8]}-{bad[:8]}.json")


def _key(good: str, bad: str, pytest_args: Sequence[str], options: GateOptions,
         kind: str) -> str:
    described = json.dumps([good, bad, list(pytest_args), repr(options), kind])
    return hashlib.sha256(described.encode()).hexdigest()[:16]


def range_commits(root: Path, good: str, bad: str, all_parents: bool = False
                  ) -> tuple[tuple[str, ...], dict[str, str], dict[str, frozenset[str]]]:
    """GOOD..BAD oldest first (along first parents, or every commit with `all_parents`),
    each commit's subject (GOOD's too), and the commits of the range each one contains."""
    # --ancestry-path: only commits that contain GOOD; one forked before it lacks GOOD's
    # own changes, so pairing it against GOOD would measure those.
    walk = ["--topo-order", "--ancestry-path"] if all_parents else ["--first-parent"]
    listed = git(root, "log", *walk, "--reverse", "--format=%H%x09%s", f"{good}..{bad}")
    subjects = dict(line.split("\t", 1) for line in listed.splitlines() if line)
    commits = tuple(subjects)
    subjects[good] = git(root, "log", "-1", "--format=%s", good)
    if not all_parents:  # a chain: each commit contains those before it
        return commits, subjects, {sha: frozenset(commits[:i + 1])
                                   for i, sha in enumerate(commits)}
    in_range = frozenset(commits)
    contains = {sha: frozenset(git(root, "rev-list", "--ancestry-path", f"{good}..{sha}")
                               .split()) & in_range
                for sha in commits}
    return commits, subjects, contains


def _open_or_new(output: Path, fresh: Bisection) -> Bisection:
    """The bisection saved at `output` when it has the same arguments (its steps are
    reused), else `fresh`; a file holding another bisection is refused, never replaced."""
    if not output.exists():
        runs.check_writable(output.parent if str(output.parent) else Path("."))
        return fresh
    try:
        saved = Bisection.from_dict(json.loads(output.read_text("utf-8")))
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise UserError(f"{output} exists and is not a bisection llmbench can read ({exc}): "
                        "pass another --output") from None
    if saved.key != fresh.key:
        raise UserError(f"{output} holds a bisection with other arguments: pass another "
                        "--output, or remove it")
    return dataclasses.replace(saved, answer=None, culprit=None, first_possible=None,
                               last_possible=None, skipped=(), reason="", watched=(),
                               parent=None)


# What one step decides: (outcome, each benchmark's verdict, why), from `commit` against
# `baseline` on `watched` within `share` seconds; ABError when the commit cannot be measured.
Judge = Callable[[str, str, tuple[str, ...], float], tuple[str, tuple[dict, ...], str]]


def _save(bisection: Bisection, output: Path) -> None:
    runs.write_atomic(output, json.dumps(bisection.to_dict(), indent=1) + "\n", replace=True)


def _benchmarks(result: GateResult) -> tuple[dict, ...]:
    return tuple({"name": c.name, "label": result.labels.get(c.name, c.name),
                  "verdict": c.verdict.value, "ratio": c.ratio, "ci_low": c.ci_low,
                  "ci_high": c.ci_high, "n_pairs": c.n_pairs}
                 for c in result.comparisons)


def _not_slower(c) -> bool:
    """Decided as not slower: unchanged, faster, or undecided between those with its
    interval below 1 + threshold (cleared, as a confirmation clears: `gate.stored.settle`)."""
    return c.verdict in CLEARED or (c.verdict == Verdict.INCONCLUSIVE and c.rules_out_slower)


def outcome_of(result: GateResult, watched: tuple[str, ...]) -> tuple[str, str]:
    """(outcome, reason) of one step's A/B: slower when any judged benchmark is a
    regression, not slower when every one is ruled out, undecided otherwise; a watched
    benchmark the commit lacks makes it one to skip."""
    # Only what the step asked about decides it: the pytest selection may collect more.
    judged = {c.name: c for c in result.comparisons if not watched or c.name in watched}
    missing = [name for name in watched if name not in judged]
    if missing:
        return SKIPPED, f"it has no {', '.join(missing)}"
    if any(c.verdict == Verdict.REGRESSION for c in judged.values()):
        return SLOWER, ""
    if judged and all(_not_slower(c) for c in judged.values()):
        return NOT_SLOWER, ""
    left = [c.name for c in judged.values() if not _not_slower(c)]
    return UNDECIDED, f"its A/B left {len(left)} benchmark(s) undecided within its share"


def steps_expected(open_commits: int, endpoints_done: bool) -> int:
    """Steps still to come: halving `open_commits`, the last commit against its parent,
    and the first step when it has not run."""
    return math.ceil(math.log2(open_commits + 1)) + 1 + (not endpoints_done)


def paired_judge(run: Callable[..., GateResult]) -> Judge:
    """Each step a paired A/B (`run(baseline, commit, watched, share)`, a GateResult); a
    budget spent before any pair leaves the step undecided."""
    def judge(baseline: str, commit: str, watched: tuple[str, ...], share: float
              ) -> tuple[str, tuple[dict, ...], str]:
        try:
            result = run(baseline, commit, watched, share)
        except BudgetSpent as exc:
            return UNDECIDED, (), str(exc)
        outcome, reason = outcome_of(result, watched)
        return outcome, _benchmarks(result), reason

    return judge


class _Stepper:
    """Runs (or reuses) steps within the budget, saving each as it ends."""

    def __init__(self, bisection: Bisection, output: Path, budget_s: float, judge: Judge,
                 log: TextIO | None, root: Path):
        self.bisection, self.output, self.judge, self.log = bisection, output, judge, log
        self.root = root
        self.deadline = time.monotonic() + budget_s

    @property
    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def say(self, text: str) -> None:
        if self.log is not None:
            print(f"llmbench bisect: {text}", file=self.log, flush=True)

    def step(self, baseline: str, commit: str, watched: tuple[str, ...], expected: int
             ) -> Step:
        b = self.bisection
        if (saved := b.find(baseline, commit, watched)) is not None:
            self.say(f"measured before: {b.step_line(saved)}")
            return saved
        share = self.left_s / max(expected, 1)
        on = (f"the {len(watched)} benchmark(s) BAD made worse" if watched
              else "every selected benchmark")
        how = "counting the work of" if b.kind == "work" else "pairing"
        self.say(f"{how} {b.name(commit)} against {b.name(baseline)} on {on}, within "
                 f"{share:.0f} s")
        start = time.monotonic()
        try:
            outcome, benchmarks, reason = self.judge(baseline, commit, watched, share)
        except ABError as exc:
            if str(exc).startswith("baseline"):  # the reference failed: not the commit's
                raise UserError(f"{b.name(baseline)} failed while {b.name(commit)} was "
                                f"measured against it: {exc}") from None
            outcome, benchmarks, reason = SKIPPED, (), str(exc)
        step = Step(baseline, commit, watched, outcome, time.monotonic() - start, benchmarks,
                    reason, b.kind)
        b.steps.append(step)
        _save(b, self.output)
        self.say(b.step_line(step))
        return step


def bisect(good: str, bad: str, *, budget_s: float, pytest_args: Sequence[str] = (),
           options: GateOptions | None = None, repo: str | Path = ".",
           output: Path | None = None, log: TextIO | None = None,
           run: Callable[..., GateResult] | None = None, work: bool = False,
           all_parents: bool = False) -> tuple[Bisection, Path]:
    """Bisect GOOD..BAD (see the module docstring); returns the bisection, saved at
    `output` (default: `default_output`) after every step and at the end. `run(baseline,
    commit, watched, budget_s)` is one paired A/B (default: `run_ab` between the two
    commits' worktrees, `watched` appended to the pytest arguments). `work`: bisect counted
    work instead (`work_steps`): one suite run per commit, compared exactly."""
    # The commits are what differ: one that changes a recorded setting (a default
    # attention, a fingerprint) is measured, not refused.
    options = dataclasses.replace(options or GateOptions(), allow_mismatch=True)
    root = repo_root(repo)
    good_sha, bad_sha = resolve_rev(root, good), resolve_rev(root, bad)
    if good_sha == bad_sha:
        raise UserError(f"{good} and {bad} are the same commit: nothing to bisect")
    try:
        git(root, "merge-base", "--is-ancestor", good_sha, bad_sha)
    except ABError:
        raise UserError(f"{good} is not an ancestor of {bad}: pass an older GOOD "
                        "(GOOD..BAD must be a range of history)") from None
    commits, subjects, contains = range_commits(root, good_sha, bad_sha, all_parents)
    if not all_parents and git(root, "rev-parse", f"{commits[0]}^") != good_sha:
        raise UserError(f"{good} is not on the first-parent line of {bad} (it came in "
                        "through a merge): pass --all-parents to bisect every commit")
    output = output or default_output(good_sha, bad_sha, work)
    kind = "work" if work else "time"
    fresh = Bisection(good_sha, bad_sha, _key(good_sha, bad_sha, pytest_args, options,
                                              kind + (" all parents" if all_parents else "")),
                      commits, subjects, kind=kind, all_parents=all_parents)
    bisection = _open_or_new(output, fresh)
    if work:
        judge = work_judge(root, pytest_args, options.work_threshold, bisection.counts)
    else:
        if run is None:
            def run(baseline: str, commit: str, watched: tuple[str, ...], share: float
                    ) -> GateResult:
                return run_ab(baseline, candidate_rev=commit, budget_s=share,
                              pytest_args=[*pytest_args, *watched], options=options,
                              repo=root, log=log, focus=True, clearing_alpha=options.alpha)
        judge = paired_judge(run)
    stepper = _Stepper(bisection, output, budget_s, judge, log, root)
    along = "with every merged commit" if all_parents else "along first parents"
    stepper.say(f"{len(commits)} commit(s) from {bisection.name(good_sha)} to "
                f"{bisection.name(bad_sha)} {along}; budget {budget_s:.0f} s")
    _walk(bisection, stepper, contains)
    _save(bisection, output)
    return bisection, output


def _walk(b: Bisection, stepper: _Stepper, contains: Mapping[str, frozenset[str]]) -> None:
    """Take steps until the bisection has its answer, and record it in `b`. `contains`
    holds, for each commit of the range, the commits of the range it contains (itself
    included): a chain's prefix along first parents, an ancestry with merges."""
    order = {sha: i for i, sha in enumerate(b.commits)}
    first = stepper.step(b.good, b.bad, (), steps_expected(len(b.commits) - 1, False))
    if first.outcome == SKIPPED:
        raise UserError(f"GOOD against BAD could not be measured: {first.reason}")
    if first.outcome == NOT_SLOWER:
        b.answer = NONE_SLOWER
        return
    # The culprit is among `open_`, and `slower` (the oldest commit known slower) is one.
    open_, slower, skipped = set(b.commits), b.bad, set()
    if first.outcome == UNDECIDED:
        _stop(b, open_, slower, "GOOD against BAD was not decided within its share of the "
                                "budget (pass a longer --budget)")
        return
    watched = b.watched = first.slower
    while choices := [c for c in open_ if c != slower and c not in skipped]:
        # Known so far, saved now: what an interruption reports.
        b.first_possible, b.last_possible = min(open_, key=order.get), slower
        _save(b, stepper.output)
        if stepper.left_s <= 0:
            _stop(b, open_, slower, "the budget was spent (pass a longer --budget, and run "
                                    "the same command again: every step measured is kept)",
                  skipped)
            return
        # The commit that halves what is open, as `git bisect` picks (the older on a tie).
        mid = max(choices, key=lambda c: (min(len(contains[c] & open_),
                                              len(open_ - contains[c])), -order[c]))
        step = stepper.step(b.good, mid, watched, steps_expected(len(open_) - 1, True))
        if step.outcome == SLOWER:
            open_, slower = open_ & contains[mid], mid
        elif step.outcome == NOT_SLOWER:
            open_ -= contains[mid]
        elif step.outcome == SKIPPED:
            skipped.add(mid)
        else:
            _stop(b, open_, slower, f"{b.name(mid)} was not decided: {step.reason}", skipped)
            return
    b.skipped = tuple(sorted(skipped, key=order.get))
    if len(open_) > 1:  # every commit left open but the slower one was skipped
        b.answer = NARROWED
        b.first_possible, b.last_possible = min(open_, key=order.get), slower
        return
    b.answer, b.culprit = FOUND, slower
    b.first_possible = b.last_possible = slower
    b.parent = git(stepper.root, "rev-parse", f"{slower}^")
    if stepper.left_s <= 0 and b.find(b.parent, slower, watched) is None:
        b.reason = ("the budget was spent before it could be paired with its parent: run the "
                    "same command again with a longer --budget")
        return
    stepper.step(b.parent, slower, watched, 1)


def _stop(b: Bisection, open_: set[str], slower: str, reason: str,
          skipped: Iterable[str] = ()) -> None:
    order = {sha: i for i, sha in enumerate(b.commits)}
    b.answer, b.reason = STOPPED, reason
    b.skipped = tuple(sorted(skipped, key=order.get))
    b.first_possible, b.last_possible = min(open_, key=order.get), slower
