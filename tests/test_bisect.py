"""`llmbench bisect`: from GOOD..BAD to the commit that made the benchmarks slower, each step
a real paired A/B between two commits' worktrees, on the fake suite (`fake_suite`): its
benchmark sleeps `llmbench.SPEED` centiseconds, and a commit that doubles SPEED plants a
2x slowdown."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from fake_suite import commit_all, git, make_fake_repo
from gate_runs import REPO, make_run, write_run

from llmbench import cli, history
from llmbench.ab import run_ab
from llmbench.ab.bisect import (
    FOUND,
    NONE_SLOWER,
    NOT_SLOWER,
    SKIPPED,
    SLOWER,
    STOPPED,
    UNDECIDED,
    Bisection,
    bisect,
    outcome_of,
    steps_expected,
)
from llmbench.cli.bisect import _environment_args
from llmbench.errors import Exit, UserError
from llmbench.gate.stats import Comparison, Verdict
from llmbench.history.bisection import culprit_step

BROKEN = "raise ImportError('this commit breaks the import')\n"


def _history(repo: Path, speeds: list[str]) -> list[str]:
    """One commit per entry after the first: its llmbench/__init__.py (SPEED = x, or a
    broken import), each with a file of its own; their shas, oldest first."""
    shas = []
    for number, source in enumerate(speeds, 1):
        (repo / "llmbench" / "__init__.py").write_text(source)
        (repo / f"change_{number}.txt").write_text(f"commit {number}\n")
        shas.append(commit_all(repo, f"change {number}"))
    return shas


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("FAKE_TRACE", str(tmp_path / "trace.txt"))
    repo = make_fake_repo(tmp_path / "repo")
    monkeypatch.chdir(repo)
    return repo


def _bisect(argv: list[str], capsys) -> tuple[int, str, str]:
    code = cli.main(["bisect", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_commit_that_doubled_the_time_is_found_and_a_rerun_reuses_every_step(
        repo, tmp_path, capsys):
    good = git(repo, "rev-parse", "HEAD").strip()
    shas = _history(repo, ["SPEED = 1.0\n"] * 10 + ["SPEED = 2.0\n"] * 6)  # 16 commits
    code, out, err = _bisect([good, "HEAD", "--budget", "10m"], capsys)
    assert code == Exit.OK, err
    assert out.startswith(f"the first slower commit: {shas[10][:8]} change 11\n")
    saved_at = Path(f"bisect-{good[:8]}-{shas[-1][:8]}.json")
    saved = Bisection.from_dict(json.loads(saved_at.read_text()))
    assert saved.answer == FOUND and saved.culprit == shas[10]
    assert len(saved.steps) <= math.log2(16) + 2
    assert saved.steps[0].outcome == SLOWER and saved.steps[0].commit == shas[-1]
    last = culprit_step(saved.to_dict())
    assert (last["baseline"], last["commit"], last["outcome"]) == (shas[9], shas[10], SLOWER)
    assert 1.6 < last["benchmarks"][0]["ratio"] < 2.5
    assert f"against its parent: {shas[10][:8]} change 11 against {shas[9][:8]} change 10: " \
        "SLOWER (" in out and "test_speed: regression x" in out
    # The same command again measures nothing: every verdict is reused.
    code, again, err = _bisect([good, "HEAD", "--budget", "10m"], capsys)
    assert code == Exit.OK and again.splitlines()[0] == out.splitlines()[0]
    assert "pairing " not in err and err.count("measured before") == len(saved.steps)
    # The report: the answer, a row per step, and the ratios along the range.
    assert cli.main(["report", str(saved_at), "-o", str(tmp_path / "report")]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    assert f"**the first slower commit: `{shas[10][:8]}` change 11**" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) == len(saved.steps)
    assert (tmp_path / "report" / "bisect.png").read_bytes()[:4] == b"\x89PNG"


def test_a_commit_that_cannot_import_is_skipped_and_named(repo, capsys):
    good = git(repo, "rev-parse", "HEAD").strip()
    shas = _history(repo, ["SPEED = 1.0\n"] * 3 + [BROKEN] + ["SPEED = 1.0\n"] * 2
                    + ["SPEED = 2.0\n"] * 2)
    found, _ = bisect(good, "HEAD", budget_s=600)
    assert found.answer == FOUND and found.culprit == shas[6]
    assert found.skipped == (shas[3],)
    skipped = [s for s in found.steps if s.outcome == SKIPPED]
    assert [s.commit for s in skipped] == [shas[3]]
    assert skipped[0].reason.startswith("candidate cannot import llmbench from its checkout")
    assert skipped[0].reason.endswith("ImportError: this commit breaks the import")
    assert all(s.outcome in (SLOWER, NOT_SLOWER, SKIPPED) for s in found.steps)


def test_a_range_with_nothing_slower_ends_at_its_first_step(repo, capsys):
    good = git(repo, "rev-parse", "HEAD").strip()
    _history(repo, ["SPEED = 1.0\n"] * 4)
    code, out, _ = _bisect([good, "HEAD", "--budget", "5m"], capsys)
    assert code == Exit.OK
    assert out.startswith("no commit in this range is slower beyond the threshold")
    assert "1 step(s)" in out


def test_an_interrupted_bisection_goes_on_from_its_saved_steps(repo, tmp_path):
    good = git(repo, "rev-parse", "HEAD").strip()
    shas = _history(repo, ["SPEED = 1.0\n"] * 5 + ["SPEED = 2.0\n"] * 3)
    output = tmp_path / "b.json"
    calls, interrupt_at = [], [3]

    def paired(baseline, commit, watched, share):
        calls.append(commit)
        if len(calls) in interrupt_at:
            raise KeyboardInterrupt
        return run_ab(baseline, candidate_rev=commit, budget_s=share,
                      pytest_args=list(watched), repo=repo, focus=True, clearing_alpha=0.05)

    with pytest.raises(KeyboardInterrupt):
        bisect(good, "HEAD", budget_s=600, output=output, run=paired)
    kept = Bisection.from_dict(json.loads(output.read_text()))
    assert [s.commit for s in kept.steps] == calls[:2]
    calls.clear()
    interrupt_at.clear()
    found, _ = bisect(good, "HEAD", budget_s=600, output=output, run=paired)
    assert found.culprit == shas[5]
    assert not set(calls) & {s.commit for s in kept.steps if s.commit != found.culprit}


def test_a_budget_too_short_stops_with_the_range_it_reached(repo, capsys):
    good = git(repo, "rev-parse", "HEAD").strip()
    _history(repo, ["SPEED = 1.0\n"] * 3 + ["SPEED = 2.0\n"])
    code, out, err = _bisect([good, "HEAD", "--budget", "1s"], capsys)
    assert code == Exit.REGRESSION
    assert "lies from" in out and "to go on with more time: llmbench bisect" in err
    saved = Bisection.from_dict(json.loads(next(Path().glob("bisect-*.json")).read_text()))
    assert saved.answer == STOPPED


@pytest.mark.parametrize(("argv", "message"), [
    (["HEAD", "HEAD"], "the same commit"),
    (["HEAD", "HEAD~1"], "is not an ancestor"),
    (["nope", "HEAD"], "unknown revision 'nope'"),
])
def test_bad_ranges_are_one_line_and_exit_2(repo, argv, message, capsys):
    _history(repo, ["SPEED = 1.0\n"])
    code, _, err = _bisect(argv, capsys)
    assert code == Exit.USAGE and message in err and len(err.strip().splitlines()) == 1


def test_a_file_holding_another_bisection_is_never_replaced(repo, tmp_path):
    good = git(repo, "rev-parse", "HEAD").strip()
    _history(repo, ["SPEED = 1.0\n"] * 2)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"note": "not a bisection"}))
    with pytest.raises(UserError, match="not a bisection llmbench can read"):
        bisect(good, "HEAD", budget_s=60, output=other)
    assert json.loads(other.read_text()) == {"note": "not a bisection"}


def test_the_steps_expected_halve_the_open_commits():
    assert steps_expected(15, endpoints_done=False) == 6  # log2(16) + parent + endpoints
    assert steps_expected(1, endpoints_done=True) == 2
    assert steps_expected(0, endpoints_done=True) == 1
    assert NONE_SLOWER != FOUND


# -- from a change point in a history ----------------------------------------------------


def _history_of_commits(env: Path, commits: list[str], factors: list[float]) -> None:
    """One saved run per (commit, factor): the fake suite's benchmark, at that speed."""
    for number, (sha, factor) in enumerate(zip(commits, factors, strict=True), 1):
        run = make_run(number, factors={"speed": factor}, benchmarks={"test_speed": "speed"},
                       module="test_fake")
        run["commit_info"]["id"] = sha
        write_run(env / f"{number:04d}_run.json", run)


def test_a_change_point_in_the_history_is_bisected_to_its_commit(repo, tmp_path, capsys):
    (repo / "benchmarks").mkdir()  # where the runs' node ids place the benchmark
    git(repo, "mv", "test_fake.py", "benchmarks/test_fake.py")
    shas = [commit_all(repo, "the suite in benchmarks/")]
    shas += _history(repo, ["SPEED = 1.0\n"] * 4 + ["SPEED = 2.0\n"] * 4)  # 5: slower
    at = [0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 8]  # each run's commit
    env = tmp_path / "runs" / "tiny-cpu-float32"
    _history_of_commits(env, [shas[i] for i in at], [2.0 if i >= 5 else 1.0 for i in at])
    code, out, err = _bisect(["--change-point", str(env), "test_speed", "--budget", "5m"],
                             capsys)
    assert code == Exit.OK, err
    assert "test_speed's newest change point" in err
    assert out.startswith(f"the first slower commit: {shas[5][:8]}")
    # Measured as the history was: its runs' model, device and dtype (threads: as given).
    result = history.judge_history(history.load_history(env))
    asked = SimpleNamespace(store=None, pytest_args=["--threads=1"])
    assert _environment_args(str(env), asked, result) == [
        "--model=tiny", "--device=cpu", "--dtype=float32"]


def test_a_change_point_bisect_cannot_find_is_refused_in_one_line(repo, tmp_path, capsys):
    sha = git(repo, "rev-parse", "HEAD").strip()
    faster = tmp_path / "faster" / "tiny-cpu-float32"
    _history_of_commits(faster, [f"{n:040x}" for n in range(12)], [1.5] * 6 + [1.0] * 6)
    machine = tmp_path / "machine" / "tiny-cpu-float32"
    _history_of_commits(machine, [sha] * 12, [1.0] * 6 + [1.5] * 6)
    for env, message in ((faster, "made it faster"), (machine, "the machine moved")):
        code, _, err = _bisect(["--change-point", str(env), "test_speed"], capsys)
        assert code == Exit.USAGE and message in err and len(err.strip().splitlines()) == 1
    code, _, err = _bisect(["HEAD", "--change-point", str(machine), "test_speed"], capsys)
    assert code == Exit.USAGE and "not both" in err


# -- counted work -------------------------------------------------------------------------


def test_work_finds_the_commit_that_added_an_op_in_single_runs(tmp_path, monkeypatch, capsys):
    """A clone of this project: three commits, the middle one adds a clone to every decode
    step; counted once per commit on the tiny model, compared exactly."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    good = git(clone, "rev-parse", "HEAD").strip()
    loop = clone / "llmbench" / "engine" / "loop.py"
    (clone / "NOTE.md").write_text("one\n")
    commit_all(clone, "a note")
    text = loop.read_text()
    planted = text.replace('    call = lm.compiled_decoder if is_static(cache) else None\n',
                           '    call = lm.compiled_decoder if is_static(cache) else None\n'
                           '    token_ids = token_ids.clone()\n', 1)
    assert planted != text
    loop.write_text(planted)
    culprit = commit_all(clone, "clone the token ids in every decode step")
    (clone / "NOTE.md").write_text("two\n")
    commit_all(clone, "another note")
    monkeypatch.chdir(clone)
    code, out, err = _bisect([good, "HEAD", "--work", "--work-threshold", "0", "--", "--model",
                              "tiny", "--threads", "1", "-k", "test_decode_steps"], capsys)
    assert code == Exit.OK, err
    assert out.startswith(f"the first commit doing more work: {culprit[:8]}")
    assert "aten::clone" in out
    # Four steps (GOOD against BAD, two halvings, the culprit against its parent) on four
    # commits, each counted by one suite run: no pairing, no commit counted twice.
    assert err.count("counting the work of") == 4
    saved = json.loads(next(clone.glob("bisect-*.json")).read_text())
    assert len(saved["counts"]) == 4


def test_ctrl_c_says_what_is_known_and_the_command_that_goes_on(repo, monkeypatch, capsys):
    good = git(repo, "rev-parse", "HEAD").strip()
    _history(repo, ["SPEED = 1.0\n"] * 3 + ["SPEED = 2.0\n"] * 3)
    real, calls = run_ab, []

    def interrupted_at_the_third(*args, **kwargs):
        calls.append(kwargs["candidate_rev"])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr("llmbench.ab.bisect.run_ab", interrupted_at_the_third)
    code, _, err = _bisect([good, "HEAD", "--budget", "5m", "--", "-q"], capsys)
    assert code == Exit.INTERRUPTED
    assert "so far the first slower commit lies from" in err
    bad = git(repo, "rev-parse", "HEAD").strip()
    assert f"To go on: llmbench bisect {good} {bad} --budget 300s --output bisect-" in err
    assert " -- -q\n" in err


def test_an_undecided_benchmark_whose_interval_rules_out_slower_is_not_slower():
    """As a confirmation clears: undecided between unchanged and faster, its interval
    below 1 + threshold answers the step's question."""
    cleared = Comparison(name="d", group=None, n_baseline=18, n_candidate=18,
                         baseline_median=1.0, candidate_median=0.94, ratio=0.94, ci_low=0.80,
                         ci_high=1.05, p_value=0.3, p_adjusted=0.3, threshold=0.10,
                         verdict=Verdict.INCONCLUSIVE, rounds_needed=None, reason="cleared")
    assert outcome_of(SimpleNamespace(comparisons=(cleared,)), ("d",))[0] == NOT_SLOWER
    wide = dataclasses.replace(cleared, ci_high=1.2)
    assert outcome_of(SimpleNamespace(comparisons=(wide,)), ("d",))[0] == UNDECIDED
    assert outcome_of(SimpleNamespace(comparisons=(cleared,)), ("d", "e"))[0] == SKIPPED


def test_a_slow_merge_is_the_culprit_along_first_parents_its_commit_with_all_parents(
        repo, tmp_path):
    good = git(repo, "rev-parse", "HEAD").strip()
    main = git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip()

    def change(name: str, subject: str, speed: str | None = None) -> str:
        (repo / name).write_text(subject + "\n")
        if speed is not None:
            (repo / "llmbench" / "__init__.py").write_text(f"SPEED = {speed}\n")
        return commit_all(repo, subject)

    change("a.txt", "main 1")
    git(repo, "checkout", "-q", "-b", "side")
    change("b.txt", "side 1")
    slow = change("c.txt", "side slows", speed="2.0")
    git(repo, "checkout", "-q", main)
    change("d.txt", "main 2")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "merge", "-q", "--no-ff", "side",
        "-m", "merge side")
    merge = git(repo, "rev-parse", "HEAD").strip()
    change("e.txt", "main 3")
    along, _ = bisect(good, "HEAD", budget_s=600, output=tmp_path / "first.json")
    assert along.answer == FOUND and along.culprit == merge and len(along.commits) == 4
    every, _ = bisect(good, "HEAD", budget_s=600, output=tmp_path / "all.json",
                      all_parents=True)
    assert every.answer == FOUND and every.culprit == slow and len(every.commits) == 6
    assert culprit_step(every.to_dict())["baseline"] == git(repo, "rev-parse", f"{slow}^").strip()
    with pytest.raises(UserError, match="--all-parents"):
        bisect(git(repo, "rev-parse", "side~1").strip(), "HEAD", budget_s=60,
               output=tmp_path / "side.json")
