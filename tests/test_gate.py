"""The gate: synthetic runs with seeded samples for the verdicts, thresholds, renderings
and exit codes; then the pytest side end to end on the tiny model (`--compare-to`, the
session's exit status, and the JUnit XML record)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest
from gate_runs import (
    ENVIRONMENT,
    SELECTION,
    TINY_ARGS,
    make_run,
    quiet_history,
    run_pytest,
    suite_copy,
    tiny_runs,
    write_run,
)

from llmbench import gate
from llmbench.errors import Exit, UserError
from llmbench.gate.stats import Verdict
from llmbench.runs import FORMAT_VERSION, EnvironmentMismatch, Run, run_from_json

DECODE = {"benchmarks/test_prefill_decode.py::test_decode_steps[ctx=16]",
          "benchmarks/test_prefill_decode.py::test_decode_steps[ctx=128]"}


QUIET = quiet_history()


def _compare(baseline: Run, candidate: Run, options: gate.GateOptions | None = None):
    """The gate on a quiet machine: the noise between runs measured and as small as the
    rounds' own, so these tests pin the rounds' rule (tests/test_stored.py pins the rest)."""
    return gate.compare_runs(baseline, candidate, options, history=QUIET)


def _run(seed, **kw) -> Run:
    return run_from_json(make_run(seed, **kw), f"run{seed}")


def _verdicts(result: gate.GateResult) -> dict[str, Verdict]:
    return {c.name: c.verdict for c in result.comparisons}


@pytest.mark.parametrize("text, value", [("10%", 0.10), ("2.5%", 0.025), ("0.1", 0.1),
                                         (" 200% ", 2.0)])
def test_parse_fraction(text, value):
    assert gate.parse_fraction(text) == pytest.approx(value)


@pytest.mark.parametrize("text, fragment", [("10", "ambiguous"), ("ten", "percentage like"),
                                            ("0%", "> 0"), ("-5%", "> 0"), ("nan", "> 0")])
def test_parse_fraction_refuses(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        gate.parse_fraction(text)


def test_parse_threshold_for():
    assert gate.parse_threshold_for("decode=20%") == ("decode", 0.2)
    assert gate.parse_threshold_for("test_x[a=b]=5%") == ("test_x[a=b]", 0.05)
    with pytest.raises(ValueError, match="GROUP_OR_BENCHMARK=PCT"):
        gate.parse_threshold_for("20%")


def test_unchanged_code_gives_no_regression():
    result = _compare(_run(1), _run(2))
    assert set(_verdicts(result).values()) == {Verdict.UNCHANGED}
    assert result.exit_code == Exit.OK
    assert gate.summary_line(result).startswith("PASS: 0 regression")


def test_a_slowdown_is_a_regression_on_exactly_the_affected_benchmarks():
    result = _compare(_run(1), _run(2, factors={"decode": 1.4}))
    verdicts = _verdicts(result)
    assert {k for k, v in verdicts.items() if v is Verdict.REGRESSION} == DECODE
    assert {v for k, v in verdicts.items() if k not in DECODE} == {Verdict.UNCHANGED}
    assert result.exit_code == Exit.REGRESSION
    assert gate.summary_line(result).startswith("REGRESSION: 2 regression")


def test_a_speedup_is_an_improvement_never_a_regression():
    result = _compare(_run(1), _run(2, factors={"decode": 1 / 1.4}))
    verdicts = _verdicts(result)
    assert {k for k, v in verdicts.items() if v is Verdict.IMPROVEMENT} == DECODE
    assert Verdict.REGRESSION not in verdicts.values()
    assert result.exit_code == Exit.OK


def test_threshold_overrides_benchmark_beats_group_beats_run():
    slow = _run(2, factors={"decode": 1.4, "prefill": 1.4})
    options = gate.GateOptions(threshold=0.2, threshold_for={
        "decode": 0.6, "test_decode_steps[ctx=128]": 0.05})
    result = _compare(_run(1), slow, options)
    thresholds = {result.labels[c.name]: c.threshold for c in result.comparisons}
    assert thresholds == {"test_prefill[in=32]": 0.2, "test_prefill[in=128]": 0.2,
                          "test_decode_steps[ctx=16]": 0.6, "test_decode_steps[ctx=128]": 0.05}
    verdicts = {result.labels[c.name]: c.verdict for c in result.comparisons}
    assert verdicts["test_decode_steps[ctx=16]"] is not Verdict.REGRESSION  # 40% < 60%
    assert verdicts["test_decode_steps[ctx=128]"] is Verdict.REGRESSION
    assert verdicts["test_prefill[in=32]"] is Verdict.REGRESSION


def test_device_default_threshold_applies_without_overrides():
    gpu = {**ENVIRONMENT, "device": "cuda"}
    result = _compare(_run(1, environment=gpu), _run(2, environment=gpu))
    assert {c.threshold for c in result.comparisons} == {0.05}
    assert {c.threshold for c in _compare(_run(1), _run(2)).comparisons} == {0.10}


def test_threshold_for_an_unknown_name_is_a_user_error():
    with pytest.raises(UserError, match="--threshold-for nope: .*groups are: decode, prefill"):
        _compare(_run(1), _run(2), gate.GateOptions(threshold_for={"nope": 0.2}))


def test_too_few_rounds_is_inconclusive_shown_and_counted_never_silent():
    result = _compare(_run(1, rounds=3), _run(2, rounds=3))
    assert set(_verdicts(result).values()) == {Verdict.INCONCLUSIVE}
    assert result.exit_code == Exit.OK  # by default: shown, counted, but not a failure
    line = gate.summary_line(result)
    assert line.startswith("PASS, NOT VERIFIED: 0 regression, 0 improvement, 0 unchanged, "
                           "4 inconclusive of 4")
    assert result.rounds_needed[1] == "rounds"
    assert f"~{result.rounds_needed[0]} rounds/side" in line
    text = gate.render_text(result)
    assert text.count("inconclusive (~") == 4
    strict = _compare(_run(1, rounds=3), _run(2, rounds=3),
                               gate.GateOptions(fail_on_inconclusive=True))
    assert strict.exit_code == Exit.REGRESSION
    assert gate.summary_line(strict).startswith("FAIL (inconclusive, --fail-on-inconclusive)")


def test_mismatched_environment_is_refused_unless_allowed():
    other = {**ENVIRONMENT, "threads": 4, "dtype": "bfloat16"}
    with pytest.raises(EnvironmentMismatch) as exc:
        _compare(_run(1), _run(2, environment=other))
    assert exc.value.differences == ["dtype 'float32' vs 'bfloat16'", "threads 2 vs 4"]
    result = _compare(_run(1), _run(2, environment=other),
                               gate.GateOptions(allow_mismatch=True))
    assert "ENVIRONMENT MISMATCH (allowed by --allow-mismatch): dtype" in gate.render_text(result)


def test_library_versions_may_differ_and_are_shown():
    upgraded = {**ENVIRONMENT, "versions": {**ENVIRONMENT["versions"], "torch": "2.14.0"}}
    result = _compare(_run(1), _run(2, environment=upgraded))
    assert "versions differ (allowed): torch 2.13.0+cpu -> 2.14.0" in gate.render_text(result)
    assert "versions: same" in gate.render_text(_compare(_run(1), _run(2)))


def test_normalize_divides_out_a_slower_machine():
    # The candidate machine is 1.5x slower: the control and every benchmark.
    slower = _run(2, factors={"decode": 1.5, "prefill": 1.5}, control_factor=1.5)
    raw = _compare(_run(1), slower)
    assert set(_verdicts(raw).values()) == {Verdict.REGRESSION}
    assert raw.speed.ratio == pytest.approx(1.5, rel=0.05)
    # Quiet runs of one code whose control never moved with them: no slope to divide by.
    assert ("not divided out: the benchmarks do not follow it between runs of one code; "
            "--normalize divides it out in full") in gate.render_text(raw)
    normalized = _compare(_run(1), slower, gate.GateOptions(normalize=True))
    assert Verdict.REGRESSION not in _verdicts(normalized).values()
    assert "divided out in full (--normalize)" in gate.render_text(normalized)


def test_normalize_without_control_samples_is_a_user_error():
    bare = make_run(2)
    bare["llmbench"]["control_s"] = []
    candidate = run_from_json(bare, "bare")
    assert _compare(_run(1), candidate).speed is None
    with pytest.raises(UserError, match="--normalize needs .* bare has none"):
        _compare(_run(1), candidate, gate.GateOptions(normalize=True))


def test_no_benchmarks_in_common_is_a_user_error():
    other = _run(2, benchmarks={"test_other": "other"})
    with pytest.raises(gate.NothingInCommon, match="no benchmarks in common between run1"):
        _compare(_run(1), other)


def test_benchmarks_in_one_run_only_are_listed_not_compared():
    fewer = make_run(2)
    fewer["benchmarks"].pop()
    result = _compare(_run(1), run_from_json(fewer, "fewer"))
    assert len(result.comparisons) == 3
    assert result.only_baseline == ("benchmarks/test_prefill_decode.py::test_decode_steps"
                                    "[ctx=128]",)
    assert "1 only in the baseline run, not compared" in gate.render_text(result)
    assert gate.summary_line(result).endswith("1 benchmarks in one run only, not compared")


def test_a_benchmark_that_did_other_work_is_set_aside_not_judged():
    """The same name doing other work (another profile's tokens) would be judged as a
    regression by its time alone: 2x the tokens, 2x the time. It is listed instead."""
    more_tokens = make_run(2, factors={"test_decode_steps[ctx=128]": 2.0})
    changed = more_tokens["benchmarks"][-1]
    changed["extra_info"] = {**changed["extra_info"], "output_tokens": 20}
    result = _compare(_run(1), run_from_json(more_tokens, "more"))
    key = "benchmarks/test_prefill_decode.py::test_decode_steps[ctx=128]"
    assert [c.name for c in result.comparisons] == list(_run(1).benchmarks)[:3]
    assert result.other_work == {key: "output_tokens 10 vs 20"}
    assert result.exit_code == Exit.OK
    assert (f"1 did other work in the two runs (baseline vs candidate; another profile?), not "
            f"compared: {key} (output_tokens 10 vs 20)") in gate.render_text(result)
    assert gate.summary_line(result).endswith("1 did other work in the two runs, not compared")
    assert gate.to_json(result)["other_work"] == {
        key: "output_tokens 10 vs 20"}


def test_a_threshold_may_name_a_benchmark_set_aside():
    """It is still in both runs: naming it is no user error, it just judges nothing."""
    other = make_run(2)
    other["benchmarks"][-1]["extra_info"] = {"output_tokens": 20}
    options = gate.GateOptions(threshold_for={"test_decode_steps[ctx=128]": 0.3})
    result = _compare(_run(1), run_from_json(other, "other"), options)
    assert len(result.comparisons) == 3 and len(result.other_work) == 1


def test_a_field_only_one_run_recorded_is_no_difference():
    older = make_run(2)
    for i, bench in enumerate(older["benchmarks"]):
        # a run saved before cases recorded their tokens, or one whose server did not say
        bench["extra_info"] = {} if i % 2 else {"output_tokens": None}
    result = _compare(_run(1), run_from_json(older, "older"))
    assert (len(result.comparisons), result.other_work) == (4, {})


def test_nothing_alike_says_the_names_did_other_work():
    other = make_run(2)
    for bench in other["benchmarks"]:
        bench["extra_info"] = {"output_tokens": 32}
    with pytest.raises(gate.NothingInCommon,
                       match=r"4 of the same names did other work, e\.g\. output_tokens 10 vs "
                             r"32\): were they run with the same -k and profile\?"):
        _compare(_run(1), run_from_json(other, "other"))


def test_same_name_in_two_modules_is_labelled_by_fullname():
    a, b = make_run(1), make_run(2)
    for run, seed in ((a, 3), (b, 4)):
        run["benchmarks"] += make_run(seed, module="test_other")["benchmarks"]
    result = _compare(run_from_json(a, "a"), run_from_json(b, "b"))
    assert sorted(result.labels.values())[0] == (
        "benchmarks/test_other.py::test_decode_steps[ctx=128]")


def test_renderings_carry_the_same_verdicts():
    result = _compare(_run(1), _run(2, factors={"decode": 1.4}))
    text = gate.render(result, "text").splitlines()
    assert text[-1] == gate.summary_line(result)
    header = next(i for i, line in enumerate(text) if line.startswith("benchmark "))
    assert text[header].split() == ["benchmark", "baseline", "candidate", "ratio", "CI", "p",
                                    "adj", "work", "verdict"]
    assert [line.split()[-1] for line in text[header + 2:header + 6]] == [
        "unchanged", "unchanged", "regression", "regression"]
    markdown = gate.render(result, "markdown")
    assert markdown.count("| **regression** |") == 2
    assert markdown.splitlines()[-1] == f"**{gate.summary_line(result)}**"
    data = json.loads(gate.render(result, "json"))
    assert data["counts"] == {"regression": 2, "improvement": 0, "unchanged": 2,
                              "inconclusive": 0, "not confirmed": 0, "not slower": 0}
    assert data["exit_code"] == Exit.REGRESSION
    assert [c["verdict"] for c in data["comparisons"]] == [
        "unchanged", "unchanged", "regression", "regression"]
    assert data["speed"]["ratio"] > 0


def test_json_has_no_infinity_for_single_round_intervals():
    result = _compare(_run(1, rounds=1), _run(2, rounds=1))
    data = json.loads(gate.render(result, "json"))  # strict JSON: would fail on Infinity
    assert {c["ci_high"] for c in data["comparisons"]} == {None}
    assert "[0.000, inf]" in gate.render_text(result)


def test_gate_options_validate_their_values():
    with pytest.raises(ValueError, match="alpha"):
        gate.GateOptions(alpha=0.7)
    with pytest.raises(ValueError, match="threshold"):
        gate.GateOptions(threshold_for={"decode": -1.0})


# --- pytest side, on the tiny model ------------------------------------------------------

@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return tiny_runs(tmp_path_factory)


def _gate_case(junit: str) -> ET.Element:
    root = ET.fromstring(junit)
    (case,) = [c for c in root.iter("testcase") if c.get("name") == "regression-gate"]
    assert case.get("classname") == "llmbench"
    return case


def test_first_run_says_there_is_nothing_to_compare(runs):
    assert runs.first_rc == 0
    assert "nothing to compare with" in runs.first_out
    assert "this run, once saved, is the first" in runs.first_out


def test_pytest_unchanged_code_passes_and_junit_records_a_passing_gate(runs):
    assert runs.same_rc == 0, runs.same_out[-3000:]
    assert "llmbench regression gate" in runs.same_out
    assert f"baseline:  {runs.base}" in runs.same_out  # latest = the run before this one
    assert "0 regression" in runs.same_out
    case = _gate_case(runs.same_junit)
    assert case.find("failure") is None and case.find("error") is None
    properties = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert properties["regression"] == "0"
    assert properties["compared_to"] == runs.base


def test_pytest_slower_runs_without_commits_are_not_confirmed_exit_6(runs):
    """The suite's copy is no git checkout: its runs name no code, so nothing can be
    confirmed by a paired A/B. The slowed decode is 'not confirmed' (exit 6), the testcase
    skipped with the summary as its reason; prefill is not called slower."""
    assert runs.slow_rc == 6, runs.slow_out[-3000:]
    assert "NOT CONFIRMED: 0 regression" in runs.slow_out
    assert "the baseline run recorded no commit" in runs.slow_out
    assert "Traceback" not in runs.slow_out
    root = ET.fromstring(runs.slow_junit)
    suite = root.find("testsuite")
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("0", "0", "1")
    skipped = _gate_case(runs.slow_junit).find("skipped")
    assert skipped.get("message").startswith("NOT CONFIRMED: 0 regression")
    rows = [line for line in runs.slow_out.splitlines()
            if line.startswith("test_") and re.search(r"\[\d+\.\d+, ", line)]
    assert any(r.startswith("test_decode_steps[ctx=16]") and r.endswith("not confirmed")
               for r in rows), rows
    assert not any(r.startswith("test_prefill") and r.endswith(("regression", "confirmed"))
                   for r in rows), rows
    # The verdict is saved with the run, for compare and report to show later.
    saved = json.loads(open(runs.slow, encoding="utf-8").read())["llmbench"]
    assert saved["format"] == FORMAT_VERSION
    assert saved["verdict"]["exit_code"] == 6
    assert saved["confirmation"]["status"] == "not run"


def test_saved_runs_record_an_injected_slowdown(runs):
    slow = json.loads(open(runs.slow, encoding="utf-8").read())
    assert slow["llmbench_injected"] == {"slow_down": {"decode_step": 9.0}}
    assert "llmbench_injected" not in json.loads(open(runs.base, encoding="utf-8").read())


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    return suite_copy(tmp_path_factory.mktemp("suite"))


@pytest.mark.parametrize("args, fragment", [
    (["--compare-to=missing.json"], "--compare-to: no such run file: missing.json"),
    (["--normalize"], "--normalize only apply with --compare-to"),
    (["--threshold=20%", "--alpha=0.01"], "--threshold, --alpha only apply with --compare-to"),
    (["--compare-to=latest", "--benchmark-disable"], "drop --benchmark-disable"),
    (["--compare-to=latest", "--threshold=10"], "ambiguous"),
])
def test_pytest_usage_errors_exit_before_any_benchmark(suite, args, fragment):
    proc = run_pytest(suite, "--model", "tiny", "--no-save", *args, SELECTION[0])
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert fragment in proc.stderr
    assert "Traceback" not in proc.stderr


def test_pytest_model_mismatch_is_refused_before_running(suite, tmp_path):
    baseline = write_run(tmp_path / "0001_x.json", make_run(1))
    proc = run_pytest(suite, "--model", "distilgpt2@random", "--no-save",
                      f"--compare-to={baseline}", SELECTION[0])
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR
    assert "model 'tiny' vs 'distilgpt2@random'" in proc.stderr
    assert "--allow-mismatch" in proc.stderr


def test_pytest_cannot_compare_at_the_end_is_a_junit_error(suite, runs, tmp_path):
    """Threads are known only once the run is done; a mismatch then is an error (exit 4)."""
    altered = json.loads(open(runs.base, encoding="utf-8").read())
    altered["llmbench"]["environment"]["threads"] = 3
    baseline = write_run(tmp_path / "0001_threads.json", altered)
    junit = tmp_path / "junit.xml"
    proc = run_pytest(suite, *TINY_ARGS, "--rounds", "1", "--no-save",
                      f"--compare-to={baseline}", f"--junitxml={junit}", SELECTION[0])
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout[-3000:]
    assert "cannot compare: runs come from different environments: threads 3 vs 1" in proc.stdout
    error = _gate_case(junit.read_text()).find("error")
    assert error is not None and "threads 3 vs 1" in error.get("message")
