"""A/B mode's front door: the revision and the pytest arguments it is given, the checks before
any side starts, and the command line. The paired A/B itself (turns, pairs, verdicts, the
worktree's removal): test_pairing.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from gate_runs import make_run, quiet_history

from llmbench import ab, gate, runs
from llmbench.cli import main
from llmbench.errors import Exit


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def fake_repo(tmp_path) -> Path:
    repo = tmp_path / "repo"
    (repo / "llmbench").mkdir(parents=True)
    (repo / "llmbench" / "__init__.py").write_text("SPEED = 1.0\n")
    (repo / "conftest.py").write_text("")
    (repo / "test_fake.py").write_text("def test_speed():\n    pass\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "speed 1")
    return repo


@pytest.mark.parametrize("arg", ["--rounds=3", "--baseline-dir", "--no-save", "-n",
                                 "--compare-to=latest"])
def test_options_ab_sets_itself_are_refused(arg):
    with pytest.raises(ab.ABError, match="set by llmbench ab"):
        ab.check_pytest_args(["-k", "decode", arg])


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
    code = main(["ab", "main", "--budget", "90s", "--threshold", "20%", "--", "--model", "tiny",
                 "-k", "decode", "--budget"])
    assert code == Exit.USAGE
    assert capsys.readouterr().err == "llmbench ab: error: stop here\n"
    assert seen["rev"] == "main" and seen["budget_s"] == 90
    assert seen["pytest_args"] == ["--model", "tiny", "-k", "decode", "--budget"]
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
