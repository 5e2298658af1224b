"""Confirm before condemning, for real: the suite's gate on the tiny model, in this repository,
settles a stored comparison's slower benchmarks by a paired A/B against the baseline's commit.

A planted 2x decode slowdown becomes a confirmed regression (exit 1) on decode alone; a commit
that changes nothing becomes no regression once the A/B has re-measured both commits. In both,
the stored baseline is made to look faster on decode than it ran, so that the stored runs
call decode slower and ask for the A/B whatever the machine did between the runs.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from gate_runs import REPO, run_pytest

DECODE = "benchmarks/test_prefill_decode.py::test_decode_steps[ctx=16]"
PREFILL = "benchmarks/test_prefill_decode.py::test_prefill[in=32]"
ARGS = ["--benchmark-only", "--model", "tiny", "--threads", "1", "--rounds", "8",
        "--warmup-rounds", "1", "-p", "no:cacheprovider", "--threshold=50%",
        "--confirm-budget=150s"]

pytestmark = [pytest.mark.slow,
              pytest.mark.alone]  # the A/A must be cleared: nothing may run beside it


def _head() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> Path:
    """A run of the two benchmarks, recorded as HEAD's clean code (the working tree may hold
    uncommitted changes while developing; the A/B re-measures HEAD itself)."""
    folder = tmp_path_factory.mktemp("confirm") / "baselines"
    proc = run_pytest(REPO, "--benchmark-only", "--model", "tiny", "--threads", "1",
                      "--rounds", "8", "--warmup-rounds", "1", "-p", "no:cacheprovider",
                      f"--baseline-dir={folder}", PREFILL, DECODE)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (path,) = folder.glob("*/*.json")
    data = json.loads(path.read_text())
    data["commit_info"].update(id=_head(), dirty=False)
    path.write_text(json.dumps(data))
    return path


def _judge(baseline: Path, tmp_path: Path, *extra: str, repo: Path = REPO
           ) -> tuple[subprocess.CompletedProcess, dict]:
    runs = tmp_path / "runs"
    proc = run_pytest(repo, *ARGS, f"--baseline-dir={runs}", f"--compare-to={baseline}",
                      *extra, PREFILL, DECODE, timeout=900)
    found = list(runs.glob("*/*.json"))
    assert len(found) == 1, (proc.stdout + proc.stderr)[-4000:]
    return proc, json.loads(found[0].read_text())["llmbench"]


def _faster_decode(baseline: Path, tmp_path: Path, factor: float) -> Path:
    """The baseline with its decode rounds `factor` times faster: the stored runs then see
    decode slower whatever this machine's speed did between the two runs (it swings by 2x
    beside other tests), so the paired A/B is certain to be asked; it re-measures both."""
    fast = json.loads(baseline.read_text())
    for bench in fast["benchmarks"]:
        if bench["fullname"] == DECODE:
            bench["stats"]["data"] = [x / factor for x in bench["stats"]["data"]]
    faked = tmp_path / "baselines" / baseline.parent.name / "0001_fast.json"
    faked.parent.mkdir(parents=True)
    faked.write_text(json.dumps(fast))
    return faked


def test_a_planted_2x_decode_slowdown_is_confirmed_on_decode_only(baseline, tmp_path):
    proc, saved = _judge(_faster_decode(baseline, tmp_path, 2), tmp_path, "-p",
                         "llmbench.bench.inject", "--slow-down=decode_step=1.0")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    confirmation = saved.get("confirmation", {})
    assert confirmation["status"] == "ran", confirmation
    assert DECODE in confirmation["benchmarks"]
    verdicts = {c["name"]: c["verdict"] for c in confirmation["comparisons"]}
    assert verdicts[DECODE] == "regression"
    # Prefill was not slowed: beside other tests the stored runs may call it slower, and then
    # the A/B must not.
    assert verdicts.get(PREFILL) != "regression"
    assert saved["verdict"]["counts"]["regression"] == 1
    assert "confirmed by a paired A/B against" in out


def test_a_commit_that_changes_nothing_is_cleared_by_the_ab(baseline, tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "changes nothing"], cwd=clone, check=True)
    # Recorded as REPO's HEAD, the clone's HEAD~1; decode faked 4x faster.
    proc, saved = _judge(_faster_decode(baseline, tmp_path, 4), tmp_path, repo=clone)
    out = proc.stdout + proc.stderr
    assert saved.get("confirmation", {}).get("status") == "ran", out[-4000:]
    # The faked benchmark is confirmed; another the stored runs found slower by chance (the
    # machine is busy with the other tests) may be re-measured beside it, and is cleared too.
    assert DECODE in saved["confirmation"]["benchmarks"]
    assert saved["verdict"]["counts"]["regression"] == 0, out[-4000:]
    decode = next(c for c in saved["confirmation"]["comparisons"] if c["name"] == DECODE)
    # Decided on the pairs: within 50% both ways, or cleared (its pairs rule out +50%, at 8
    # pairs most often, before they can show it within 50% both ways).
    assert (decode["verdict"] == "unchanged"
            or (decode["verdict"] == "inconclusive"
                and decode["reason"].startswith("cleared"))), out[-4000:]
    assert proc.returncode == 0, out[-4000:]
