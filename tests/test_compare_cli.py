"""`llmbench compare`: exit 0 without a regression, 1 with one, 2 when the runs cannot be
compared, 6 when a slowdown cannot be proven beyond the noise between runs, always with one
clear line and never a traceback; then end to end on real runs of the tiny model (unchanged
code, a slowed decode, and the same pair swapped: a speedup)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from gate_runs import ENVIRONMENT, make_run, quiet_history_json, tiny_runs, write_run

from llmbench.cli import main
from llmbench.errors import Exit


def compare(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(["compare", *argv])
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_cannot_compare(code: int, out: str, err: str, *fragments: str) -> None:
    assert code == Exit.USAGE
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("llmbench compare: error: ")
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture
def base(tmp_path):
    """A baseline in a folder whose earlier runs measured the noise between runs (small):
    the stored verdicts are then the rounds' verdicts."""
    for i, data in enumerate(quiet_history_json(), start=1):
        write_run(tmp_path / "base" / f"000{i}_quiet.json", data)
    return write_run(tmp_path / "base" / "0005_a.json", make_run(1))


def test_no_regression_exits_0_with_table_and_summary(capsys, base, tmp_path):
    cand = write_run(tmp_path / "cand.json", make_run(2))
    code, out, err = compare(capsys, str(base), str(cand))
    assert (code, err) == (Exit.OK, "")
    lines = out.splitlines()
    assert lines[0] == f"baseline:  {base} (commit 00000000, 2026-01-01T00:00:00+00:00)"
    assert any(line.startswith("benchmark ") and line.rstrip().endswith("verdict")
               for line in lines)
    assert lines[-1].startswith("PASS: 0 regression, 0 improvement, 4 unchanged")


def test_regression_exits_1(capsys, base, tmp_path):
    cand = write_run(tmp_path / "cand.json", make_run(2, factors={"test_prefill[in=32]": 1.5}))
    code, out, _ = compare(capsys, str(base), str(cand))
    assert code == Exit.REGRESSION
    regressed = [line.split()[0] for line in out.splitlines() if line.endswith(" regression")]
    assert regressed == ["test_prefill[in=32]"]


def test_a_lone_baseline_cannot_prove_a_slowdown_not_confirmed_exits_6(capsys, tmp_path):
    """No two saved runs of one code: the noise between runs is unknown, so a slowdown on
    the rounds is 'not confirmed', the line says how to decide it, and the exit is 6."""
    lone = write_run(tmp_path / "lone" / "0001_a.json", make_run(1))
    cand = write_run(tmp_path / "cand.json", make_run(2, factors={"test_prefill[in=32]": 1.5}))
    code, out, _ = compare(capsys, str(lone), str(cand))
    assert code == Exit.NOT_CONFIRMED
    assert [line.split()[0] for line in out.splitlines() if line.endswith(" not confirmed")] == [
        "test_prefill[in=32]"]
    assert "noise between runs: not measured yet" in out
    assert "`llmbench ab 00000000`" in out  # the baseline's commit
    assert out.splitlines()[-1].startswith("NOT CONFIRMED: 0 regression, 0 improvement, "
                                           "0 unchanged, 3 inconclusive, 1 not confirmed of 4")


def test_options_reach_the_rule(capsys, base, tmp_path):
    cand = write_run(tmp_path / "cand.json", make_run(2, factors={"prefill": 1.3}))
    code, out, _ = compare(capsys, str(base), str(cand), "--threshold", "50%",
                           "--threshold-for", "test_prefill[in=128]=5%", "--alpha", "0.01",
                           "--format", "json")
    data = json.loads(out)
    assert code == Exit.REGRESSION
    assert data["options"]["alpha"] == 0.01
    verdicts = {c["label"]: (c["threshold"], c["verdict"]) for c in data["comparisons"]}
    assert verdicts["test_prefill[in=128]"] == (0.05, "regression")
    assert verdicts["test_prefill[in=32]"][0] == 0.5
    assert verdicts["test_prefill[in=32]"][1] != "regression"


def test_markdown_format(capsys, base, tmp_path):
    cand = write_run(tmp_path / "cand.json", make_run(2))
    code, out, _ = compare(capsys, str(base), str(cand), "--format", "markdown")
    assert code == Exit.OK
    assert "| benchmark | baseline | candidate | ratio | CI | p adj | work | verdict |" in out


def test_fail_on_inconclusive(capsys, tmp_path):
    a = write_run(tmp_path / "a.json", make_run(1, rounds=3))
    b = write_run(tmp_path / "b.json", make_run(2, rounds=3))
    code, out, _ = compare(capsys, str(a), str(b))
    assert code == Exit.OK and "4 inconclusive of 4" in out.splitlines()[-1]
    code, out, _ = compare(capsys, str(a), str(b), "--fail-on-inconclusive")
    assert code == Exit.REGRESSION


def _without_samples(run):
    for entry in run["benchmarks"]:
        entry["stats"].pop("data")
    return run


@pytest.mark.parametrize("make, fragments", [
    (None, ["no such run file"]),
    (lambda p: p.write_text('{"benchmarks": [{"stats": {"data": [0.1,'), ["truncated JSON"]),
    (lambda p: p.write_text("<html>"), ["invalid JSON"]),
    (lambda p: write_run(p, _without_samples(make_run(2))),
     ["no raw per-round samples", "--benchmark-save-data"]),
    (lambda p: write_run(p, make_run(2, benchmarks={"test_other": "other"})),
     ["no benchmarks in common"]),
    (lambda p: write_run(p, make_run(2, environment={**ENVIRONMENT, "model": "smollm2-135m",
                                                      "threads": 4})),
     ["different environments", "model 'tiny' vs 'smollm2-135m'", "threads 2 vs 4",
      "--allow-mismatch"]),
])
def test_cannot_compare_exits_2_with_one_line(capsys, base, tmp_path, make, fragments):
    cand = tmp_path / "cand.json"
    if make is not None:
        make(cand)
    assert_cannot_compare(*compare(capsys, str(base), str(cand)), *fragments)


@pytest.mark.parametrize("other", [
    lambda base: base,
    lambda base: base.parent / ".." / base.parent.name / base.name,
    lambda base: write_run(base.parent / "copy.json", json.loads(base.read_text())),
], ids=["same-path", "another-path", "a-copy"])
def test_the_same_run_on_both_sides_exits_2(capsys, base, other):
    code, out, err = compare(capsys, str(base), str(other(base)), "--allow-mismatch")
    assert_cannot_compare(code, out, err, "both sides are the same run", str(base))


def test_allow_mismatch_overrides_and_says_so(capsys, base, tmp_path):
    cand = write_run(tmp_path / "cand.json", make_run(2, environment={**ENVIRONMENT,
                                                                      "threads": 4}))
    code, out, _ = compare(capsys, str(base), str(cand), "--allow-mismatch")
    assert code == Exit.OK
    assert "ENVIRONMENT MISMATCH (allowed by --allow-mismatch): threads 2 vs 4" in out


@pytest.mark.parametrize("argv, fragment", [
    (["--threshold", "10"], "ambiguous"),
    (["--alpha", "0.6"], "must be in (0, 0.5)"),
    (["--threshold-for", "decode"], "GROUP_OR_BENCHMARK=PCT"),
    (["--threshold-for", "nothing=5%"], "no benchmark or group of that name"),
    (["--format", "html"], "invalid choice"),
])
def test_bad_options_exit_2(capsys, base, tmp_path, argv, fragment):
    cand = write_run(tmp_path / "cand.json", make_run(2))
    code, out, err = compare(capsys, str(base), str(cand), *argv)
    assert code == Exit.USAGE and fragment in err and "Traceback" not in err


def test_normalize_without_control_samples_exits_2(capsys, base, tmp_path):
    bare = make_run(2)
    bare["llmbench"]["control_s"] = []
    cand = write_run(tmp_path / "cand.json", bare)
    assert_cannot_compare(*compare(capsys, str(base), str(cand), "--normalize"),
                          "--normalize needs machine-speed control samples")


def test_a_folder_compares_its_newest_run(capsys, base, tmp_path):
    write_run(base.parent / "0006_b.json", make_run(3, factors={"decode": 2.0}))
    code, out, _ = compare(capsys, str(base), str(base.parent))
    assert code == Exit.REGRESSION
    assert f"candidate: {base.parent / '0006_b.json'}" in out


def test_the_installed_command_exits_with_the_codes(base, tmp_path):
    same = write_run(tmp_path / "same.json", make_run(2))
    slow = write_run(tmp_path / "slow.json", make_run(2, factors={"decode": 2.0}))
    cmd = [sys.executable, "-m", "llmbench", "compare", str(base)]
    ok = subprocess.run([*cmd, str(same)], capture_output=True, text=True)
    bad = subprocess.run([*cmd, str(slow)], capture_output=True, text=True)
    missing = subprocess.run([*cmd, str(tmp_path / "nope.json")], capture_output=True, text=True)
    lone = write_run(tmp_path / "lone" / "0001_a.json", make_run(1))
    unproven = subprocess.run([sys.executable, "-m", "llmbench", "compare", str(lone), str(slow)],
                              capture_output=True, text=True)
    assert (ok.returncode, bad.returncode, missing.returncode, unproven.returncode) == (
        0, 1, 2, 6)
    assert missing.stdout == "" and missing.stderr.count("\n") == 1


# --- End to end on the tiny model --------------------------------------------------------

@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return tiny_runs(tmp_path_factory)


def _verdicts(out: str) -> dict[str, str]:
    return {line.split()[0]: line.split()[-1] for line in out.splitlines()
            if line.startswith("test_")}


def test_tiny_unchanged_code_is_no_regression(capsys, runs):
    code, out, _ = compare(capsys, runs.base, runs.same, "--threshold", "200%")
    assert code == Exit.OK, out
    assert "regression" not in _verdicts(out).values()


def _json_verdicts(out: str) -> dict[str, str]:
    return {c["label"]: c["verdict"] for c in json.loads(out)["comparisons"]}


def test_tiny_slowed_decode_is_not_confirmed_on_decode_only(capsys, runs):
    """Runs of a copy of the suite outside git name no code: the slowed decode is slower on
    the rounds but cannot be proven beyond the noise between runs, and prefill is not."""
    code, out, _ = compare(capsys, runs.base, runs.slow, "--threshold", "200%",
                           "--format", "json")
    assert code == Exit.NOT_CONFIRMED, out
    verdicts = _json_verdicts(out)
    assert [name for name, v in verdicts.items() if v in ("regression", "not confirmed")] == [
        "test_decode_steps[ctx=16]"]
    assert verdicts["test_decode_steps[ctx=16]"] == "not confirmed"


def test_tiny_speedup_is_never_a_regression(capsys, runs):
    code, out, _ = compare(capsys, runs.slow, runs.base, "--threshold", "200%",
                           "--format", "json")
    assert code == Exit.OK, out
    verdicts = _json_verdicts(out)
    assert verdicts["test_decode_steps[ctx=16]"] == "inconclusive"  # faster, not proven
    assert not {"regression", "not confirmed"} & set(verdicts.values())


def test_a_saved_run_is_judged_against_the_noise_known_when_it_was_made(capsys, tmp_path):
    """Runs saved after the candidate do not change its verdict: without them the noise
    between runs was not measured, and a slowdown stays not confirmed, as the suite said."""
    folder = tmp_path / "runs"
    base = write_run(folder / "0001_a.json", make_run(1))
    slow = make_run(2, factors={"test_prefill[in=32]": 1.5})
    slow["datetime"] = "2026-01-02T00:00:00+00:00"
    cand = write_run(folder / "0002_b.json", slow)
    for i, data in enumerate(quiet_history_json(), start=3):
        data["datetime"] = "2026-01-03T00:00:00+00:00"  # made after the candidate
        write_run(folder / f"000{i}_quiet.json", data)
    code, out, _ = compare(capsys, str(base), str(cand))
    assert code == Exit.NOT_CONFIRMED
    assert "noise between runs: not measured yet" in out
    later = make_run(2, factors={"test_prefill[in=32]": 1.5})
    later["datetime"] = "2026-01-04T00:00:00+00:00"
    code, out, _ = compare(capsys, str(base), str(write_run(folder / "0007_c.json", later)))
    assert code == Exit.REGRESSION
