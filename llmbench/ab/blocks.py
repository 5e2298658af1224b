"""A/B in blocks (`llmbench ab --blocks N`): each side's suite runs N times as fresh pytest
processes in ABBA order, and each side's blocks are pooled into one run, judged on block
medians (`llmbench.gate.stats`), with the block as the unit."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from llmbench import runs
from llmbench.ab.checkout import (
    ABError,
    Checkout,
    check_commit,
    check_imports,
    check_pytest_args,
    side_env,
)

DEFAULT_BLOCKS = 4
DEFAULT_ROUNDS = 5  # per block: each block's median is one observation for the gate


def block_order(blocks: int) -> list[tuple[str, str]]:
    """ABBA: baseline first in even blocks, candidate first in odd ones."""
    return [("baseline", "candidate") if i % 2 == 0 else ("candidate", "baseline")
            for i in range(blocks)]


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
            check_commit(run, side)
        label = (f"{side.root}" + (f" @ {side.commit[:8]}" if side.commit else "")
                 + f" ({blocks} blocks x {rounds} rounds)")
        pooled.append(runs.pool_runs(loaded, source=label))
    return pooled[0], pooled[1]


