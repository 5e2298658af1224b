"""A/B mode: ABBA block order, the revision's own code on the baseline side, pooling, and
a worktree that is always removed. Most tests use a throwaway git repository whose "suite"
writes runs from a `SPEED` constant in its own `llmbench` package, so a baseline that
imported the wrong llmbench could not produce the expected numbers; one slow test runs the
real suite on the tiny model against this repository's HEAD."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
from gate_runs import REPO, SELECTION, TINY_ARGS, make_run, quiet_history

from llmbench import ab, gate, runs
from llmbench.cli import main
from llmbench.errors import EXIT_USAGE
from llmbench.gate.stats import Verdict

FAKE_CONFTEST = '''
import json, os, subprocess
from pathlib import Path

import llmbench

ENV = {"model": "fake", "device": "cpu", "device_name": "x", "dtype": "float32",
       "threads": 1, "fingerprint": {"name": "fake"}, "versions": {}}


def pytest_addoption(parser):
    parser.addoption("--baseline-dir")
    parser.addoption("--rounds", type=int, default=3)
    parser.addoption("--model", default="fake")


def pytest_sessionfinish(session):
    config = session.config
    if os.environ.get("FAKE_FAIL"):
        print("fake suite: failing on purpose")
        session.exitstatus = 1
        return
    if os.environ.get("FAKE_NO_RUN"):  # as when every selected benchmark is skipped
        return
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    rounds = config.getoption("rounds")
    # Each run's rounds carry a trace of its process, as real timings always differ between
    # runs: identical samples on both sides would be one run judged against itself.
    trace = 1e-9 * (os.getpid() % 997)
    data = [llmbench.SPEED * (1 + 0.01 * i + trace) for i in range(rounds)]
    run = {"benchmarks": [{"name": "test_speed", "fullname": "test_fake.py::test_speed",
                           "group": "speed", "stats": {"data": data}}],
           "commit_info": {"id": commit},
           "llmbench": {"environment": ENV, "control_s": [0.01] * rounds}}
    folder = Path(config.getoption("baseline_dir")) / "fake-cpu-float32"
    folder.mkdir(parents=True, exist_ok=True)
    number = len(list(folder.glob("*.json"))) + 1
    (folder / f"{number:04d}_x.json").write_text(json.dumps(run))
'''


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def fake_repo(tmp_path) -> Path:
    repo = tmp_path / "repo"
    (repo / "llmbench").mkdir(parents=True)
    (repo / "llmbench" / "__init__.py").write_text("SPEED = 1.0\n")
    (repo / "conftest.py").write_text(textwrap.dedent(FAKE_CONFTEST))
    (repo / "test_fake.py").write_text("def test_speed():\n    pass\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "speed 1")
    return repo


def _worktrees(repo: Path) -> int:
    return _git(repo, "worktree", "list", "--porcelain").count("worktree ")


def test_block_order_is_abba():
    assert ab.block_order(4) == [("baseline", "candidate"), ("candidate", "baseline"),
                                 ("baseline", "candidate"), ("candidate", "baseline")]


@pytest.mark.parametrize("arg", ["--rounds=3", "--baseline-dir", "--no-save", "-n",
                                 "--compare-to=latest"])
def test_options_ab_sets_itself_are_refused(arg):
    with pytest.raises(ab.ABError, match="set by llmbench ab"):
        ab.check_pytest_args(["-k", "decode", arg])


def test_a_change_in_the_working_tree_is_measured_against_the_revision(fake_repo, tmp_path):
    (fake_repo / "llmbench" / "__init__.py").write_text("SPEED = 2.0\n")  # uncommitted
    keep = tmp_path / "blocks"
    result = ab.run_ab("HEAD", blocks=2, rounds=3, repo=fake_repo, keep=str(keep))
    (comparison,) = result.comparisons
    # The baseline ran the committed SPEED = 1.0 (the worktree's llmbench), the candidate
    # the working tree's 2.0; the editable install's llmbench has no SPEED at all.
    assert comparison.baseline_median == pytest.approx(1.01)
    assert comparison.candidate_median == pytest.approx(2.02)
    assert (comparison.n_baseline, comparison.n_candidate) == (6, 6)
    assert comparison.verdict is Verdict.REGRESSION
    assert result.exit_code == 1
    head = _git(fake_repo, "rev-parse", "HEAD").strip()
    assert f"@ {head[:8]} (2 blocks x 3 rounds)" in result.baseline.source
    assert len(list((keep / "baseline").glob("*/*.json"))) == 2
    assert len(list((keep / "candidate").glob("*/*.json"))) == 2
    assert _worktrees(fake_repo) == 1  # the temporary worktree is gone


def test_same_code_on_both_sides_is_unchanged(fake_repo):
    result = ab.run_ab("HEAD", blocks=2, rounds=4, repo=fake_repo,
                       options=gate.GateOptions(threshold=0.05))
    assert [c.verdict for c in result.comparisons] == [Verdict.UNCHANGED]
    assert result.exit_code == 0


def test_a_failing_block_is_reported_and_the_worktree_removed(fake_repo, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "1")
    with pytest.raises(ab.ABError, match=r"baseline block 1/2 failed \(pytest exit 1\).*"
                                         "failing on purpose"):
        ab.run_ab("HEAD", blocks=2, rounds=3, repo=fake_repo)
    assert _worktrees(fake_repo) == 1


@pytest.mark.parametrize("env, pytest_args, fragment", [
    ("FAKE_NO_RUN", [], "baseline block 1/1 saved no run in "),
    (None, ["-k", "no_such_benchmark"], "baseline block 1/1 selected no benchmark in "),
])
def test_a_block_without_a_run_is_one_line_naming_the_side(fake_repo, monkeypatch, capsys,
                                                           env, pytest_args, fragment):
    if env:
        monkeypatch.setenv(env, "1")
    monkeypatch.chdir(fake_repo)  # the CLI's candidate is the working tree it runs in
    code = main(["ab", "HEAD", "--blocks", "1", "--rounds", "2", "--", *pytest_args])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert "Traceback" not in err and "AssertionError" not in err
    lines = err.splitlines()
    assert len(lines) == 2, err  # the start line, then the error
    assert lines[1].startswith("llmbench ab: error: ") and fragment in lines[1], lines[1]
    assert _worktrees(fake_repo) == 1


def test_unknown_revision_and_no_repository(fake_repo, tmp_path):
    with pytest.raises(ab.ABError, match="unknown revision 'no-such-branch'"):
        ab.run_ab("no-such-branch", repo=fake_repo)
    outside = tmp_path / "plain"
    outside.mkdir()
    with pytest.raises(ab.ABError, match="not inside a git checkout"):
        ab.run_ab("HEAD", repo=outside)


def test_a_side_that_would_import_another_llmbench_is_refused(tmp_path):
    (tmp_path / "conftest.py").write_text("")  # a checkout without its own llmbench
    with pytest.raises(ab.ABError, match="would import llmbench from .*, not from its checkout"):
        ab.check_imports(ab.Checkout("baseline", tmp_path))


def test_a_revision_without_the_suite_is_refused(tmp_path):
    with pytest.raises(ab.ABError, match="has no conftest.py"):
        ab.check_imports(ab.Checkout("baseline", tmp_path))


def test_cli_passes_everything_after_double_dash_to_pytest(monkeypatch, capsys):
    seen = {}

    def fake_run_ab(rev, **kwargs):
        seen.update(rev=rev, **kwargs)
        raise ab.ABError("stop here")

    monkeypatch.setattr(ab, "run_ab", fake_run_ab)
    code = main(["ab", "main", "--blocks", "2", "--threshold", "20%", "--", "--model", "tiny",
                 "-k", "decode", "--blocks"])
    assert code == EXIT_USAGE
    assert capsys.readouterr().err == "llmbench ab: error: stop here\n"
    assert seen["rev"] == "main" and seen["blocks"] == 2 and seen["rounds"] == ab.DEFAULT_ROUNDS
    assert seen["pytest_args"] == ["--model", "tiny", "-k", "decode", "--blocks"]
    assert seen["options"].threshold == 0.2


def test_cli_prints_the_verdicts_and_exits_with_their_code(monkeypatch, capsys):
    baseline = runs.run_from_json(make_run(1), "baseline")
    candidate = runs.run_from_json(make_run(2, factors={"decode": 2.0}), "candidate")
    result = gate.compare_runs(baseline, candidate, history=quiet_history())
    monkeypatch.setattr(ab, "run_ab", lambda rev, **kwargs: result)
    code = main(["ab", "main", "--format", "json"])
    assert code == result.exit_code
    assert code == 1  # the decode group is twice as slow
    assert json.loads(capsys.readouterr().out)["summary"]


@pytest.mark.slow
def test_real_suite_on_tiny_against_head(tmp_path):
    """The real suite, both sides, two blocks each; what is asserted is the plumbing
    (HEAD's code in the worktree, pooled rounds, cleanup), not a verdict."""
    args = [a for a in TINY_ARGS if a not in ("--benchmark-only", "-p", "no:cacheprovider")]
    rounds_at = args.index("--rounds")
    del args[rounds_at:rounds_at + 2]
    result = ab.run_ab("HEAD", blocks=2, rounds=3, pytest_args=[*args, SELECTION[0]],
                       repo=REPO, keep=str(tmp_path / "blocks"))
    (comparison,) = result.comparisons
    assert (comparison.n_baseline, comparison.n_candidate) == (6, 6)
    # run_blocks checked every baseline block's recorded commit against REV's; HEAD itself
    # may have moved on meanwhile (others commit), so read the commit off the run.
    recorded = result.baseline.commit_info["id"]
    assert f"@ {recorded[:8]}" in result.baseline.source
    assert _git(REPO, "cat-file", "-t", recorded).strip() == "commit"
    assert result.speed is not None
    checkout = result.baseline.source.split(" @ ")[0]
    assert not Path(checkout).exists()
    assert checkout not in _git(REPO, "worktree", "list", "--porcelain")  # others may have some
