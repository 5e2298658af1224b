"""Paired A/B (`llmbench ab` without --blocks): the two suites take turns one round at a
time, each side runs its own code, the verdict is judged on the pairs, and both workers and
the worktree are gone afterwards whatever happened.

Most tests use a throwaway git repository whose one benchmark sleeps `llmbench.SPEED`
centiseconds per round through pytest-benchmark's own `benchmark.pedantic`, and whose
conftest saves the run in llmbench's format; every round also appends (side, pid, start,
end) to a trace file, so turn-taking is checked on the clock. One slow test runs the real
suite on the tiny model.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from fake_suite import FAKE_TEST, make_fake_repo
from fake_suite import git as _git
from gate_runs import REPO, TINY_ARGS

from llmbench import ab, gate, runs
from llmbench.ab import cpus, pair_worker, pairing
from llmbench.errors import Exit
from llmbench.gate.stats import Verdict

# The installed command: `python -m llmbench` in the fake repository would import its fake
# llmbench, the working directory coming first on the import path.
LLMBENCH = str(Path(sys.executable).parent / "llmbench")


@pytest.fixture
def fake_repo(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("FAKE_TRACE", str(tmp_path / "trace.txt"))
    return make_fake_repo(tmp_path / "repo")


def _trace(tmp_path: Path) -> list[tuple[str, int, float, float]]:
    rows = (line.split() for line in (tmp_path / "trace.txt").read_text().splitlines())
    return [(side, int(pid), float(start), float(end)) for side, pid, start, end, _ in rows]


def _speeds(tmp_path: Path) -> dict[str, set[float]]:
    """The SPEED each side's rounds ran with: which llmbench each side imported."""
    found: dict[str, set[float]] = {}
    for line in (tmp_path / "trace.txt").read_text().splitlines():
        side, *_, speed = line.split()
        found.setdefault(side, set()).add(float(speed))
    return found


def _worktrees(repo: Path) -> int:
    return _git(repo, "worktree", "list", "--porcelain").count("worktree ")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child of another process still answers kill(0): read its state.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[-1][:1] != "Z"


def test_a_slower_working_tree_is_a_regression_judged_on_pairs(fake_repo, tmp_path):
    (fake_repo / "llmbench" / "__init__.py").write_text("SPEED = 2.0\n")  # uncommitted
    keep = tmp_path / "runs"
    result = ab.run_ab("HEAD", repo=fake_repo, keep=str(keep), budget_s=120)
    (comparison,) = result.comparisons
    # Each side ran its own code: the committed SPEED = 1 against the working tree's 2.
    assert _speeds(tmp_path) == {"baseline": {1.0}, "candidate": {2.0}}
    assert comparison.verdict is Verdict.REGRESSION and result.exit_code == 1
    # Decided at a look (12 pairs is the first a signed-rank p can pass; how soon depends on
    # how the sleeps fell), and no more pairs spent than that look.
    assert comparison.unit == "pairs" and comparison.n_pairs in result.design.looks[1:]
    assert comparison.n_baseline == comparison.n_candidate == comparison.n_pairs
    assert "judged on pairs of rounds taken in turn" in gate.render(result, "text")
    # The saved runs are ordinary runs that record the pairing, beside every pair.
    saved = [json.loads(p.read_text()) for p in sorted(keep.glob("*/*/*.json"))]
    assert [s["llmbench_pairing"]["side"] for s in saved] == ["baseline", "candidate"]
    assert saved[0]["llmbench_pairing"]["session"] == saved[1]["llmbench_pairing"]["session"]
    (record,) = json.loads((keep / "pairing.json").read_text())["benchmarks"]
    assert record["stopped"] == "regression"
    assert len(record["candidate"]) == len(record["baseline"]) == comparison.n_pairs
    assert _worktrees(fake_repo) == 1
    # `compare` on the kept runs knows them for the two sides of one pairing: same verdicts.
    base, cand = (runs.load_run(p) for p in sorted(keep.glob("*/*/*.json")))
    again = gate.compare_runs(base, cand)
    assert [(c.verdict, c.ratio, c.n_pairs) for c in again.comparisons] == [
        (c.verdict, c.ratio, c.n_pairs) for c in result.comparisons]
    unpaired = gate.compare_runs(cand, base)  # the wrong way round: not a pairing, ranks
    assert unpaired.comparisons[0].unit == "rounds"


def test_turns_never_overlap_and_alternate_abba(fake_repo, tmp_path):
    # Undecidable, so all 12 pairs run: a 0.001% threshold, and an alpha no 12 pairs can pass.
    result = ab.run_ab("HEAD", repo=fake_repo, budget_s=120, max_pairs=12,
                       options=gate.GateOptions(threshold=0.00001, alpha=1e-9))
    (comparison,) = result.comparisons
    assert comparison.n_pairs == 12 and comparison.verdict is Verdict.INCONCLUSIVE
    rounds = sorted(_trace(tmp_path), key=lambda row: row[2])
    assert len(rounds) == 24
    for before, after in itertools.pairwise(rounds):
        assert before[3] <= after[2], f"{before} overlaps {after}"
    sides = "".join(side[0] for side, *_ in rounds)
    assert sides == "bccb" * 6, sides  # pair by pair: baseline first, then candidate first
    pids = {side: {pid for s, pid, *_ in rounds if s == side} for side in ("baseline",
                                                                             "candidate")}
    assert all(len(p) == 1 for p in pids.values())  # one long-lived process a side
    assert not any(_alive(next(iter(p))) for p in pids.values())


def test_both_sides_collect_at_once_but_load_in_turn(fake_repo, tmp_path, monkeypatch):
    # Collecting (imports) times nothing and may overlap: each side waits, while collecting,
    # until the other has started collecting too, which only happens if both were let go.
    # Loading and warming a model runs each side's full thread count, so never overlaps.
    rendezvous = tmp_path / "rendezvous"
    rendezvous.mkdir()
    monkeypatch.setenv("FAKE_RENDEZVOUS", str(rendezvous))
    monkeypatch.setenv("FAKE_LOAD_S", "1.0")
    ab.run_ab("HEAD", repo=fake_repo, budget_s=120, max_pairs=8,
              options=gate.GateOptions(threshold=0.00001, alpha=1e-9))
    met, loads = {}, {}
    for line in Path(f"{tmp_path / 'trace.txt'}.load").read_text().splitlines():
        what, side, *rest = line.split()
        if what == "met":
            met[side] = rest[0] == "True"
        else:
            loads[side] = (float(rest[0]), float(rest[1]))
    assert met == {"baseline": True, "candidate": True}
    (base_start, base_end), (cand_start, cand_end) = loads["baseline"], loads["candidate"]
    assert base_end <= cand_start or cand_end <= base_start, loads  # one after the other
    first_round = min(start for _, _, start, _ in _trace(tmp_path))
    assert first_round >= max(base_end, cand_end)


def test_same_code_on_both_sides_is_unchanged(fake_repo):
    result = ab.run_ab("HEAD", repo=fake_repo, budget_s=120)
    assert [c.verdict for c in result.comparisons] == [Verdict.UNCHANGED]
    assert result.exit_code == 0


def test_a_benchmark_on_one_side_only_is_listed_not_an_error(fake_repo):
    extra = FAKE_TEST.replace("def test_speed", "def test_new")
    (fake_repo / "test_new.py").write_text(textwrap.dedent(extra))  # untracked: candidate only
    result = ab.run_ab("HEAD", repo=fake_repo, budget_s=120)
    assert [c.name for c in result.comparisons] == ["test_fake.py::test_speed"]
    assert result.only_candidate == ("test_new.py::test_new",)
    assert "1 benchmarks in one run only" in gate.render(result, "text")


def test_a_failing_side_is_one_line_exit_2_with_both_workers_ended(fake_repo, tmp_path):
    env = {**os.environ, "FAKE_FAIL_SIDE": "candidate"}
    proc = subprocess.run([LLMBENCH, "ab", "HEAD", "--budget", "60"],
                          cwd=fake_repo, env=env, capture_output=True, text=True)
    assert proc.returncode == Exit.USAGE, proc.stderr
    assert "Traceback" not in proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("llmbench ab: error: candidate failed test_fake.py::test_speed")
    assert "failing on purpose" in error
    assert {side for side, *_ in _trace(tmp_path)} == {"baseline"}  # the candidate never timed
    assert _worktrees(fake_repo) == 1


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_ends_both_workers_removes_the_worktree_and_prints_what_was_decided(
        fake_repo, tmp_path, stop):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # Ctrl-C reaches a command run from a terminal, whose SIGINT is the default. A suite
    # started in the background by a non-interactive shell (`.ci/run &`) inherits SIGINT
    # ignored, and so would the command: give it the terminal's disposition.
    proc = subprocess.Popen(
        [LLMBENCH, "ab", "HEAD", "--threshold", "0.001%", "--alpha", "1e-9",
         "--max-pairs", "10000"], cwd=fake_repo, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    trace = tmp_path / "trace.txt"
    give_up = time.monotonic() + 120
    while not (trace.exists() and len(trace.read_text().splitlines()) >= 20):
        assert proc.poll() is None and time.monotonic() < give_up, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(stop)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted after" in err and "decided so far" in err
    assert "test_fake.py::test_speed: inconclusive" in err
    assert "Traceback" not in err
    pids = {pid for _, pid, *_ in _trace(tmp_path)}
    assert len(pids) == 2 and not any(_alive(pid) for pid in pids)
    assert _worktrees(fake_repo) == 1


UNREACHED_TEST = '''
import os, time

import pytest


def _trace(what):
    with open(os.environ["FAKE_TRACE"] + ".setup", "a") as trace:
        trace.write(f"{what} {os.environ.get('LLMBENCH_PAIR_SIDE')}\\n")


@pytest.mark.benchmark(group="first")
def test_first(benchmark):
    benchmark.pedantic(time.sleep, args=(4.0,), rounds=3)  # one pair spends the budget


@pytest.fixture
def costly_setup():
    _trace("fixture")  # stands for a compile or a copy of the model


@pytest.mark.benchmark(group="second")
def test_second(benchmark, costly_setup):
    _trace("body")
    benchmark.pedantic(time.sleep, args=(0.01,), rounds=3)
'''


# Its budget outlasts the sides' start (seconds on a slow machine) but not the start and one
# pair of real sleeps: beside other test workers the start could spend it all.
@pytest.mark.alone
def test_a_benchmark_the_budget_cannot_reach_is_never_set_up(fake_repo, tmp_path):
    (fake_repo / "test_unreached.py").write_text(textwrap.dedent(UNREACHED_TEST))
    _git(fake_repo, "add", ".")
    _git(fake_repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "two")
    result = ab.run_ab("HEAD", pytest_args=["test_unreached.py"], repo=fake_repo, budget_s=8)
    stopped = {r["name"].rsplit("::", 1)[-1]: r["stopped"]
               for r in result.pairing["benchmarks"]}
    assert stopped == {"test_first": "budget", "test_second": "not reached"}
    assert not (tmp_path / "trace.txt.setup").exists()  # neither side set it up


ONE_SIDED_TEST = '''
import os

import pytest

import llmbench


@pytest.fixture
def costly_setup():
    with open(os.environ["FAKE_TRACE"] + ".setup", "a") as trace:
        trace.write(f"{os.environ.get('LLMBENCH_PAIR_SIDE')}\\n")


@pytest.mark.benchmark(group="new")
def test_new_path(benchmark, costly_setup):
    if llmbench.SPEED == 1.0:
        pytest.skip("the baseline's code has no such path")
    benchmark.pedantic(lambda: None, rounds=3)
'''


def test_a_benchmark_the_baseline_skips_is_never_set_up_on_the_candidate(fake_repo, tmp_path):
    (fake_repo / "test_one_sided.py").write_text(textwrap.dedent(ONE_SIDED_TEST))
    _git(fake_repo, "add", ".")
    _git(fake_repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    (fake_repo / "llmbench" / "__init__.py").write_text("SPEED = 1.5\n")  # uncommitted
    result = ab.run_ab("HEAD", pytest_args=["test_one_sided.py", "test_fake.py"],
                       repo=fake_repo, budget_s=30)
    assert result.pairing["only"]["candidate"] == ["test_one_sided.py::test_new_path"]
    # The baseline set it up and skipped it; the candidate was told to skip it first.
    assert (tmp_path / "trace.txt.setup").read_text().split() == ["baseline"]
    assert [r["name"] for r in result.pairing["benchmarks"]] == ["test_fake.py::test_speed"]


def test_a_short_budget_leaves_a_benchmark_inconclusive_with_the_pairs_it_needs(fake_repo):
    result = ab.run_ab("HEAD", repo=fake_repo, budget_s=12, max_pairs=1000,
                       options=gate.GateOptions(threshold=0.00001, alpha=1e-9))
    (comparison,) = result.comparisons
    assert comparison.verdict is Verdict.INCONCLUSIVE
    assert comparison.rounds_needed is not None and comparison.rounds_needed > 0
    assert result.pairing["benchmarks"][0]["stopped"] == "budget"
    assert "inconclusive (~" in gate.render(result, "text")


def test_a_budget_spent_before_any_pair_is_one_clear_error(fake_repo):
    with pytest.raises(ab.ABError, match="before any benchmark had a timed pair: pass a "
                                         "longer --budget"):
        ab.run_ab("HEAD", repo=fake_repo, budget_s=0.001)
    assert _worktrees(fake_repo) == 1


def test_the_worker_plugin_is_standalone():
    """It is loaded into REV's process, whose llmbench may predate it: it must not import
    llmbench (nor anything else outside the standard library, pytest and pytest-benchmark)."""
    source = Path(pair_worker.__file__).read_text()
    assert "import llmbench" not in source and "from llmbench" not in source
    code = ("import sys; sys.modules['llmbench'] = None; import importlib.util as u; "
            f"s = u.spec_from_file_location('w', {pair_worker.__file__!r}); "
            "m = u.module_from_spec(s); s.loader.exec_module(m); print(m.MODULE_NAME)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip() == pair_worker.MODULE_NAME, proc.stderr


def test_a_suite_started_by_hand_with_the_worker_is_told_what_it_is(tmp_path):
    folder = pairing.worker_module_dir(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(folder)}
    env.pop(pair_worker.ADDRESS_ENV, None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", pair_worker.MODULE_NAME,
                           "--co", "-q", str(tmp_path)], env=env, capture_output=True,
                          text=True, cwd=tmp_path)
    assert proc.returncode != 0 and "started by llmbench ab, not by hand" in proc.stderr


@pytest.mark.slow
@pytest.mark.alone  # the A/A must pass at the real threshold: nothing may run beside it
@pytest.mark.parametrize("slowdown", [None, 1.0])
def test_real_suite_on_tiny_paired_against_head(tmp_path, slowdown):
    """The real suite on both sides. A/A passes; with every decode step taking twice as
    long on the candidate, only the decode benchmarks are regressions."""
    drop = {"--benchmark-only", "-p", "no:cacheprovider"}
    args = [a for a in TINY_ARGS if a not in drop]
    at = args.index("--rounds")
    del args[at:at + 2]
    inject = ("-p", "llmbench.bench.inject", f"--slow-down=decode_step={slowdown}")
    keep = tmp_path / "runs"
    result = ab.run_ab("HEAD", pytest_args=[*args, "-k", "decode or prefill"], repo=REPO,
                       candidate_args=inject if slowdown else (), budget_s=240,
                       keep=str(keep))
    verdicts = {c.name.rsplit("::", 1)[-1]: c.verdict for c in result.comparisons}
    assert len(verdicts) == 5
    # --threads 1: both sides shared one CPU (on one CPU, there was nothing to choose).
    shared = cpus.shared_cpus(args)
    assert result.pairing["cpus"] == (None if shared is None else sorted(shared))
    assert shared is None or len(shared) == 1
    regressions = {name for name, v in verdicts.items() if v is Verdict.REGRESSION}
    if slowdown is None:
        assert not regressions and result.exit_code == 0, verdicts
    else:
        assert regressions == {n for n in verdicts if n.startswith("test_decode")}, verdicts
        assert result.exit_code == 1
    # The slowdown ran on the candidate side only (run_ab has checked that the baseline's
    # run records REV's commit, i.e. it ran the worktree's code).
    saved = {side: json.loads(next((keep / side).glob("*/*.json")).read_text())
             for side in ("baseline", "candidate")}
    assert "llmbench_injected" not in saved["baseline"]
    assert ("llmbench_injected" in saved["candidate"]) == (slowdown is not None)


def test_kept_runs_come_with_the_verdicts_drawn(fake_repo, tmp_path):
    (fake_repo / "llmbench" / "__init__.py").write_text("SPEED = 2.0\n")  # uncommitted
    keep = tmp_path / "kept"
    proc = subprocess.run([LLMBENCH, "ab", "HEAD", "--budget", "60", "--keep", str(keep)],
                          cwd=fake_repo, capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert (keep / "verdicts.png").read_bytes().startswith(b"\x89PNG")
    assert f"verdicts drawn in {keep / 'verdicts.png'}" in proc.stderr
