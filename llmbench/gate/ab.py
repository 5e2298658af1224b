"""A/B mode: a git revision against the working tree, on the same machine at the same time.

A stored baseline was measured minutes or days ago, on a machine whose speed has drifted
since (on a shared 2-core box, separate runs of the same code land 14-20% apart). A/B mode
removes the drift instead of modelling it. REV is checked out into a temporary `git
worktree`, and its benchmark suite (the baseline) and the working tree's (the candidate)
run side by side:
- paired (the default, `judge_in_turn`, see `pairing`): two long-lived processes take turns
  one round at a time, and each benchmark is judged on its pairs of rounds, measured seconds
  apart, by a group-sequential test within a time budget. The recommended check for a
  change on a noisy machine;
- in blocks (`run_blocks`, `--blocks N`): each side's suite runs N times as fresh processes
  in ABBA order, and the gate compares block medians (`stats`), with the block as the unit.

Each side imports llmbench from its own checkout: the run's cwd is that checkout and it
comes first on PYTHONPATH (ahead of the editable install). Both modes check this before
timing anything, and check each baseline run's recorded commit against REV afterwards.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from llmbench import runs
from llmbench.engine.allocator import steady_malloc_env
from llmbench.errors import UserError
from llmbench.gate import stats
from llmbench.gate.compare import GateOptions, GateResult, compare_paired, compare_runs

DEFAULT_BLOCKS = 4
DEFAULT_ROUNDS = 5  # per block: each block's median is one observation for the gate
# Options llmbench ab sets itself for every block; passing them through would break pooling.
RESERVED_OPTIONS = ("--baseline-dir", "--no-save", "--rounds", "--compare-to",
                    "--benchmark-disable", "-n", "--numprocesses")


class ABError(UserError):
    """A block failed, or a side imported the wrong code."""


@dataclass(frozen=True)
class Checkout:
    """One side of the A/B: the checkout whose suite runs, and pytest arguments for it alone
    (e.g. a plugin that injects a slowdown, in tests of the gate)."""

    name: str  # "baseline" or "candidate"
    root: Path
    extra_args: tuple[str, ...] = ()
    commit: str | None = None  # the commit its runs must record, when known


def _git(repo: Path, *args: str) -> str:
    try:
        proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    except FileNotFoundError:
        raise ABError("git is not installed: llmbench ab needs it") from None
    if proc.returncode != 0:
        message = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise ABError(f"git {' '.join(args)} failed: {message}")
    return proc.stdout.strip()


def repo_root(path: str | os.PathLike = ".") -> Path:
    """The top of the git checkout holding `path` (the candidate's working tree)."""
    try:
        return Path(_git(Path(path), "rev-parse", "--show-toplevel"))
    except ABError:
        raise ABError(f"{Path(path).resolve()} is not inside a git checkout: run llmbench ab "
                      "from the repository whose working tree is the candidate") from None


def resolve_rev(repo: Path, rev: str) -> str:
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except ABError:
        raise ABError(f"unknown revision {rev!r} in {repo}: pass a branch, tag or commit "
                      "(git rev-parse must know it)") from None


@contextlib.contextmanager
def worktree(repo: Path, rev: str) -> Iterator[tuple[Path, str]]:
    """Check `rev` out, detached, into a temporary worktree; always removed afterwards."""
    sha = resolve_rev(repo, rev)
    parent = Path(tempfile.mkdtemp(prefix="llmbench-ab-"))
    path = parent / f"baseline-{sha[:8]}"
    try:
        _git(repo, "worktree", "add", "--detach", "--quiet", str(path), sha)
        yield path, sha
    finally:
        try:
            _git(repo, "worktree", "remove", "--force", str(path))
        except ABError:
            shutil.rmtree(path, ignore_errors=True)
            with contextlib.suppress(ABError):
                _git(repo, "worktree", "prune")
        shutil.rmtree(parent, ignore_errors=True)


def block_order(blocks: int) -> list[tuple[str, str]]:
    """ABBA: baseline first in even blocks, candidate first in odd ones."""
    return [("baseline", "candidate") if i % 2 == 0 else ("candidate", "baseline")
            for i in range(blocks)]


def end_on_sigterm() -> None:
    """Make SIGTERM (a CI job's timeout, `kill`) take Ctrl-C's path: both sides end, the
    worktree is removed and what was decided is printed, instead of dying mid-comparison
    with a worktree left registered."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def check_pytest_args(pytest_args: Sequence[str]) -> None:
    for arg in pytest_args:
        name = arg.split("=", 1)[0]
        if name in RESERVED_OPTIONS:
            hint = " (use llmbench ab --rounds)" if name == "--rounds" else ""
            raise ABError(f"{name} is set by llmbench ab for every block: drop it from the "
                          f"pytest arguments{hint}")


def child_env() -> dict[str, str]:
    """This environment, minus what would make a child pytest think it is an xdist worker
    (pytest-benchmark then turns itself off): e.g. when started from the gate's own tests."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("PYTEST_XDIST_") and k != "PYTEST_CURRENT_TEST"}


def side_env(side: Checkout) -> dict[str, str]:
    """The environment a side's pytest runs in: its checkout first on the import path, and
    glibc's malloc thresholds fixed for both sides alike (`allocator`: REV's own code may
    predate fixing them itself)."""
    env = steady_malloc_env(child_env())
    env["PYTHONPATH"] = os.pathsep.join(
        [str(side.root), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def check_imports(side: Checkout) -> None:
    """Refuse to time a side that would import llmbench from anywhere but its checkout."""
    if not (side.root / "conftest.py").is_file():
        raise ABError(f"{side.name} checkout {side.root} has no conftest.py: that revision "
                      "predates the benchmark suite")
    probe = subprocess.run(
        [sys.executable, "-c", "import llmbench, os; print(os.path.realpath(llmbench.__file__))"],
        cwd=side.root, env=side_env(side), capture_output=True, text=True)
    imported = Path(probe.stdout.strip() or "?")
    if probe.returncode != 0 or side.root.resolve() not in imported.parents:
        raise ABError(f"{side.name} would import llmbench from {imported}, not from its "
                      f"checkout {side.root}: {probe.stderr.strip()[-200:]}")


Runner = Callable[..., subprocess.CompletedProcess]


PYTEST_NO_TESTS = 5  # pytest.ExitCode.NO_TESTS_COLLECTED: nothing selected


def _block_run(name: str, where: str, side: Checkout, proc: subprocess.CompletedProcess,
               folder: Path, before: set[Path]) -> Path:
    """The run one block saved; ABError naming the side and why when there is none."""
    tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
    if proc.returncode == PYTEST_NO_TESTS:
        raise ABError(f"{name} {where} selected no benchmark in {side.root} (pytest: {tail}): "
                      "check -k, -m and the paths passed after --")
    if proc.returncode != 0:
        raise ABError(f"{name} {where} failed (pytest exit {proc.returncode}) in "
                      f"{side.root}: {tail}")
    new = sorted(set(folder.glob("*/*.json")) - before)
    if not new:
        raise ABError(f"{name} {where} saved no run in {side.root}: no benchmark was timed "
                      f"(pytest: {tail}); select benchmarks that run, not skipped ones")
    assert len(new) == 1, f"one block, one pytest, one run; found {new} in {folder}"
    return new[0]


def run_blocks(baseline: Checkout, candidate: Checkout, *, blocks: int, rounds: int,
               pytest_args: Sequence[str], workdir: Path, log: TextIO | None = None,
               runner: Runner = subprocess.run) -> tuple[runs.Run, runs.Run]:
    """Run both sides' suites alternately; return each side's blocks pooled into one run."""
    assert blocks >= 1 and rounds >= 1
    check_pytest_args(pytest_args)
    sides = {"baseline": baseline, "candidate": candidate}
    for side in sides.values():
        check_imports(side)
    paths: dict[str, list[Path]] = {"baseline": [], "candidate": []}
    for index, order in enumerate(block_order(blocks), start=1):
        for name in order:
            side = sides[name]
            out = workdir / name
            before = set(out.glob("*/*.json"))
            # `--opt=value`: pytest picks its rootdir before it knows conftest options, and
            # takes the value of `--baseline-dir DIR` for a test path once DIR exists.
            cmd = [sys.executable, "-m", "pytest", "--benchmark-only", "-q",
                   "-p", "no:cacheprovider", f"--baseline-dir={out}",
                   f"--rounds={rounds}", *pytest_args, *side.extra_args]
            started = time.perf_counter()
            proc = runner(cmd, cwd=side.root, env=side_env(side), capture_output=True,
                          text=True)
            paths[name].append(_block_run(name, f"block {index}/{blocks}", side, proc, out,
                                          before))
            if log is not None:
                print(f"llmbench ab: block {index}/{blocks} {name} done in "
                      f"{time.perf_counter() - started:.0f} s", file=log, flush=True)
    pooled = []
    for name, side in sides.items():
        loaded = [runs.load_run(p) for p in paths[name]]
        for run in loaded:
            recorded = run.commit_info.get("id")
            if side.commit and recorded and recorded != side.commit:
                raise ABError(f"{name} run {run.source} records commit {recorded[:8]}, not "
                              f"{side.commit[:8]}: it did not run the checked-out code")
        label = (f"{side.root}" + (f" @ {side.commit[:8]}" if side.commit else "")
                 + f" ({blocks} blocks x {rounds} rounds)")
        pooled.append(runs.pool_runs(loaded, source=label))
    return pooled[0], pooled[1]


DEFAULT_BUDGET_S = 600.0  # paired: ten minutes fits the quick selection on a 2-core CPU


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


def _check_commit(run: runs.Run, side: Checkout) -> None:
    recorded = run.commit_info.get("id")
    if side.commit and recorded and recorded != side.commit:
        raise ABError(f"{side.name} run {run.source} records commit {recorded[:8]}, not "
                      f"{side.commit[:8]}: it did not run the checked-out code")


def run_ab(rev: str, *, blocks: int | None = None, rounds: int = DEFAULT_ROUNDS,
           budget_s: float = DEFAULT_BUDGET_S, max_pairs: int | None = None,
           pytest_args: Sequence[str] = (), options: GateOptions | None = None,
           keep: str | None = None, repo: str | os.PathLike = ".",
           candidate_args: Sequence[str] = (), log: TextIO | None = None,
           on_interrupt=None) -> GateResult:
    """`llmbench ab REV`: REV's suite against the working tree's, paired round by round
    within `budget_s` (`pairing`), or with `blocks`, interleaved in blocks (this module)."""
    from llmbench.gate import sequential

    check_pytest_args(pytest_args)
    options = options or GateOptions()
    design = sequential.Design(alpha=options.alpha,
                               max_pairs=max_pairs or sequential.DEFAULT_MAX_PAIRS)
    if blocks is None and options.normalize:
        raise ABError("--normalize does not apply to a paired A/B: each pair already shares "
                      "its moment on the machine; drop it (or pass --blocks)")
    root = repo_root(repo)
    if keep is not None and Path(keep).exists() and any(Path(keep).iterdir()):
        raise ABError(f"--keep {keep}: the folder is not empty; pass a new one")
    with contextlib.ExitStack() as stack:
        workdir = Path(keep) if keep else Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="llmbench-ab-runs-")))
        source, sha = stack.enter_context(worktree(root, rev))
        baseline = Checkout("baseline", source, commit=sha)
        candidate = Checkout("candidate", root, tuple(candidate_args))
        if blocks is not None:
            if log is not None:
                print(f"llmbench ab: baseline {rev} ({sha[:8]}) in {source}; candidate: the "
                      f"working tree {root}; {blocks} blocks x {rounds} rounds", file=log)
            base, cand = run_blocks(baseline, candidate, blocks=blocks, rounds=rounds,
                                    pytest_args=pytest_args, workdir=workdir, log=log)
            return compare_runs(base, cand, options)
        if log is not None:
            print(f"llmbench ab: baseline {rev} ({sha[:8]}) in {source}; candidate: the "
                  f"working tree {root}; paired rounds, budget {budget_s:.0f} s, at most "
                  f"{design.max_pairs} pairs a benchmark", file=log)
        return judge_in_turn(baseline, candidate, pytest_args=pytest_args, workdir=workdir,
                             design=design, budget_s=budget_s, options=options, log=log,
                             on_interrupt=on_interrupt)


def judge_in_turn(baseline: Checkout, candidate: Checkout, *, pytest_args: Sequence[str],
                  workdir: Path, design, budget_s: float, options: GateOptions,
                  log: TextIO | None = None, on_interrupt=None) -> GateResult:
    """Pair two checkouts' suites round by round (`pairing`) and judge the pairs."""
    from llmbench.gate import pairing

    paired = pairing.run_paired(
        baseline, candidate, pytest_args=pytest_args, workdir=workdir, design=design,
        budget_s=budget_s, log=log, on_interrupt=on_interrupt,
        threshold_of=lambda nodeid, group, device: live_threshold(options, nodeid, group,
                                                                  device))
    base, cand = runs.load_run(paired.baseline), runs.load_run(paired.candidate)
    for run, side in ((base, baseline), (cand, candidate)):
        _check_commit(run, side)
    for record in paired.pairing["benchmarks"]:  # the saved runs are the pairs, exactly
        for run, side in ((base, "baseline"), (cand, "candidate")):
            saved = run.benchmarks.get(record["name"])
            if saved is None or list(saved.samples) != record[side]:
                raise ABError(f"{side} run {run.source} does not hold the rounds paired "
                              f"for {record['name']}")
    result = compare_paired(base, cand, design, options)
    # A benchmark one side lacks is in neither saved run: it was never paired.
    only = paired.pairing["only"]
    return dataclasses.replace(result, pairing=paired.pairing,
                               only_baseline=(*result.only_baseline, *only["baseline"]),
                               only_candidate=(*result.only_candidate, *only["candidate"]))
