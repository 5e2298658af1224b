"""One side of an A/B and where its code comes from: the git worktree that holds REV, the
environment that makes a side's pytest import its own checkout's llmbench, the check that it
did, and the options `llmbench ab` reserves for itself."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from llmbench import runs
from llmbench.engine.allocator import steady_memory_env
from llmbench.errors import UserError

# Options llmbench ab sets itself for every block; passing them through would break pooling.
RESERVED_OPTIONS = ("--baseline-dir", "--store", "--no-save", "--rounds", "--compare-to",
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


def git(repo: Path, *args: str) -> str:
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
        return Path(git(Path(path), "rev-parse", "--show-toplevel"))
    except ABError:
        raise ABError(f"{Path(path).resolve()} is not inside a git checkout: run llmbench ab "
                      "from the repository whose working tree is the candidate") from None


def resolve_rev(repo: Path, rev: str) -> str:
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except ABError:
        raise ABError(f"unknown revision {rev!r} in {repo}: pass a branch, tag or commit "
                      "(git rev-parse must know it)") from None


@contextlib.contextmanager
def worktree(repo: Path, rev: str, side: str = "baseline") -> Iterator[tuple[Path, str]]:
    """Check `rev` out, detached, into a temporary worktree; always removed afterwards."""
    sha = resolve_rev(repo, rev)
    parent = Path(tempfile.mkdtemp(prefix="llmbench-ab-"))
    path = parent / f"{side}-{sha[:8]}"
    try:
        git(repo, "worktree", "add", "--detach", "--quiet", str(path), sha)
        yield path, sha
    finally:
        try:
            git(repo, "worktree", "remove", "--force", str(path))
        except ABError:
            shutil.rmtree(path, ignore_errors=True)
            with contextlib.suppress(ABError):
                git(repo, "worktree", "prune")
        shutil.rmtree(parent, ignore_errors=True)


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
    glibc's malloc thresholds and PyTorch's huge pages set for both sides alike
    (`allocator`: REV's own code may predate setting them itself)."""
    env = steady_memory_env(child_env())
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
    if probe.returncode != 0:
        # The traceback's last line says what failed (ModuleNotFoundError: ...).
        said = (probe.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise ABError(f"{side.name} cannot import llmbench from its checkout {side.root}: "
                      f"{said[-300:]}")
    if side.root.resolve() not in imported.parents:
        raise ABError(f"{side.name} would import llmbench from {imported}, not from its "
                      f"checkout {side.root}")


def check_commit(run: runs.Run, side: Checkout) -> None:
    """Refuse a side's run that records another commit than the one checked out."""
    recorded = run.commit_info.get("id")
    if side.commit and recorded and recorded != side.commit:
        raise ABError(f"{side.name} run {run.source} records commit {recorded[:8]}, not "
                      f"{side.commit[:8]}: it did not run the checked-out code")
