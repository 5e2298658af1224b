"""History: change points across runs and the newest run's verdict.

The statistics are checked on seeded synthetic series (known shifts, drift, flat noise);
the command on synthetic run files, whose run-to-run spread is drawn per run as it is on a
shared machine (rounds inside a run agree far better than runs do).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from gate_runs import make_run, write_run

from llmbench import history
from llmbench.errors import Exit
from llmbench.history.changepoints import find_shifts, judge_newest, noise_sigma

RUN_SPREAD = 0.08  # sd of log run medians: the spread of separate runs of the same code


def _series(seed: int, n: int = 12, shift_at: int | None = None, ratio: float = 1.2,
            sd: float = RUN_SPREAD, drift: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, sd, n) + drift * np.arange(n)
    if shift_at is not None:
        x[shift_at:] += np.log(ratio)
    return x


@pytest.mark.parametrize("seed", range(20))
def test_a_20_percent_shift_is_found_where_it_happened(seed):
    x = _series(seed, n=12, shift_at=6, ratio=1.25, sd=0.05)
    shifts = find_shifts(x, alpha=0.05)
    assert [s.index for s in shifts] and abs(shifts[0].index - 6) <= 1, shifts
    assert 1.1 < shifts[0].ratio < 1.45


def test_a_shift_on_top_of_slow_drift_is_found_at_its_run():
    found = []
    for seed in range(40):
        x = _series(seed, n=16, shift_at=8, ratio=1.3, sd=0.05, drift=0.004)
        found.append([s.index for s in find_shifts(x, alpha=0.05)])
    at_the_shift = sum(any(abs(i - 8) <= 1 for i in f) for f in found)
    elsewhere = sum(any(abs(i - 8) > 1 for i in f) for f in found)
    assert at_the_shift >= 36 and elsewhere <= 4, found


@pytest.mark.parametrize("n", [8, 12, 20, 40])
def test_flat_histories_rarely_show_a_change_point(n):
    # alpha is the false-alarm rate of one series here (one benchmark): measured over 1,000
    # seeded flat series, with a margin for the simulation's own error (±1.4% at 5%).
    alarms = sum(bool(find_shifts(_series(seed, n=n), alpha=0.05)) for seed in range(1000))
    assert alarms / 1000 <= 0.05 + 0.02, alarms


def test_heavy_tailed_run_noise_keeps_the_false_alarm_rate():
    rng = np.random.default_rng(7)
    alarms = sum(bool(find_shifts(RUN_SPREAD * rng.standard_t(3, 12), alpha=0.05))
                 for _ in range(1000))
    assert alarms / 1000 <= 0.07, alarms


def test_two_shifts_are_both_found():
    x = _series(3, n=18, sd=0.03)
    x[6:] += np.log(1.3)
    x[12:] -= np.log(1.3)
    assert [s.index for s in find_shifts(x, alpha=0.05)] == [6, 12]


def test_a_significant_step_smaller_than_the_threshold_is_no_change_point():
    x = _series(4, n=16, shift_at=8, ratio=1.06, sd=0.005)
    assert [s.index for s in find_shifts(x, alpha=0.05)] == [8]
    assert find_shifts(x, alpha=0.05, threshold=0.10) == []


def test_the_noise_estimate_ignores_a_shift():
    x = _series(1, n=30, sd=0.05)
    shifted = x.copy()
    shifted[15:] += 1.0
    assert noise_sigma(shifted) == pytest.approx(noise_sigma(x), rel=0.35)
    assert 0.03 < noise_sigma(x) < 0.08


def test_a_constant_series_has_no_shift_and_a_consistent_newest_run():
    x = np.zeros(10)
    assert find_shifts(x, alpha=0.05) == []
    assert judge_newest(x, [], threshold=0.1, alpha=0.05).word == "consistent"


def test_the_newest_run_is_judged_against_its_own_level():
    level = _series(5, n=11, sd=0.03)
    up = np.append(level, np.log(1.4))
    verdict = judge_newest(up, [], threshold=0.1, alpha=0.05)
    assert verdict.verdict == "regression" and verdict.ratio > 1.3
    assert verdict.high < verdict.ratio and verdict.level_runs == 11
    down = np.append(level, np.log(0.7))
    assert judge_newest(down, [], threshold=0.1, alpha=0.05).verdict == "improvement"
    same = np.append(level, 0.0)
    assert judge_newest(same, [], threshold=0.1, alpha=0.05).word == "consistent"


def test_outside_the_interval_but_within_the_threshold_is_consistent():
    level = np.full(11, 0.0) + np.linspace(-0.001, 0.001, 11)  # a very quiet history
    x = np.append(level, np.log(1.05))
    verdict = judge_newest(x, [], threshold=0.1, alpha=0.05)
    assert verdict.ratio > verdict.high and verdict.word == "consistent"


def test_a_level_too_short_to_judge_says_so():
    x = _series(2, n=12, shift_at=9, ratio=1.5, sd=0.01)
    shifts = find_shifts(x, alpha=0.05)
    assert shifts and shifts[-1].index == 9
    verdict = judge_newest(x, shifts, threshold=0.1, alpha=0.05)
    assert verdict.word == "too few runs" and verdict.level_runs == 2


# --- the command, on run files -------------------------------------------------------------

def _write_history(folder, levels: list[float], seed: int = 0) -> None:
    """One run file per level: decode's median scaled by the level and by a per-run draw
    of the machine's run-to-run spread."""
    rng = np.random.default_rng(seed)
    for i, level in enumerate(levels, start=1):
        factor = level * float(np.exp(rng.normal(0.0, 0.03)))
        run = make_run(seed * 100 + i, factors={"decode": factor, "prefill": float(
            np.exp(rng.normal(0.0, 0.03)))})
        write_run(folder / f"{i:04d}_run.json", run)


def _llmbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmbench", "history", *args],
                          capture_output=True, text=True)


def test_a_slower_newest_run_exits_1_and_names_the_decode_benchmarks(tmp_path):
    env = tmp_path / "tiny-cpu-float32"
    _write_history(env, [1.0] * 11 + [1.5])
    proc = _llmbench(str(env), "--format", "json")
    assert proc.returncode == Exit.REGRESSION, proc.stderr
    report = json.loads(proc.stdout)
    regressed = {b["name"] for b in report["benchmarks"] if b["newest"]["verdict"] == "regression"}
    assert regressed == {"test_decode_steps[ctx=16]", "test_decode_steps[ctx=128]"}


def test_a_shift_in_the_middle_is_found_at_its_run_and_commit(tmp_path):
    env = tmp_path / "tiny-cpu-float32"
    _write_history(env, [1.0] * 6 + [1.3] * 6, seed=1)
    result = history.judge_history(history.load_history(env))
    for r in result.results:
        at = [r.shift_run(s) for s in r.shifts]
        if r.series.group == "decode":
            assert at and abs(at[0] - 7) <= 1, (r.series.name, at)
        else:
            assert at == [], (r.series.name, at)
    assert result.exit_code == Exit.OK  # the newest run is consistent with its new level
    text = history.render(result, "text")
    assert "run 0007" in text and "PASS" in text.splitlines()[-1]


def test_runs_where_a_benchmark_did_other_work_are_not_in_its_series(tmp_path):
    """A profile edited to generate twice the tokens doubles decode's time from run 7 on:
    that is another measurement, not a change point of the code."""
    env = tmp_path / "tiny-cpu-float32"
    for i in range(1, 13):
        edited = i >= 7
        run = make_run(i, factors={"decode": 2.0 if edited else 1.0})
        for bench in run["benchmarks"]:
            if bench["group"] == "decode":
                bench["extra_info"] = {"output_tokens": 20 if edited else 10}
        write_run(env / f"{i:04d}_run.json", run)
    result = history.judge_history(history.load_history(env))
    runs_of = {r.series.name: [p.run for p in r.series.points] for r in result.results}
    assert runs_of["test_decode_steps[ctx=16]"] == list(range(7, 13))
    assert runs_of["test_prefill[in=32]"] == list(range(1, 13))
    assert all(not r.shifts for r in result.results)
    assert result.exit_code == Exit.OK


def test_a_shift_with_the_same_code_on_both_sides_is_called_the_machine_s(tmp_path):
    env = tmp_path / "tiny-cpu-float32"
    _write_history(env, [1.0] * 6 + [1.3] * 6, seed=1)
    for path in env.iterdir():  # one commit throughout, as on a machine that slowed down
        run = json.loads(path.read_text())
        run["commit_info"]["id"] = "c0ffee" * 6
        path.write_text(json.dumps(run))
    result = history.judge_history(history.load_history(env))
    decode = [r for r in result.results if r.series.group == "decode"]
    assert all(r.shifts and r.code_changed(r.shifts[0]) is False for r in decode)
    assert "same commit around it" in history.render(result, "text")
    report = json.loads(history.render(result, "json"))
    assert {cp["code_changed"] for b in report["benchmarks"] for cp in b["change_points"]} == {
        False}


def test_an_injected_slowdown_counts_as_other_code(tmp_path):
    env = tmp_path / "tiny-cpu-float32"
    _write_history(env, [1.0] * 6 + [1.3] * 6, seed=1)
    for path in sorted(env.iterdir()):
        run = json.loads(path.read_text())
        run["commit_info"]["id"] = "c0ffee" * 6
        if int(path.name[:4]) >= 7:
            run["llmbench_injected"] = {"slow_down": {"decode_step": 0.3}}
        path.write_text(json.dumps(run))
    result = history.judge_history(history.load_history(env))
    decode = [r for r in result.results if r.series.group == "decode"]
    assert all(r.code_changed(r.shifts[0]) is True for r in decode)
    assert decode[0].shift_commit(decode[0].shifts[0]) == "c0ffeec0+slow decode_stepx1.3"
    # The trend plots' run labels say it too: the same commit, slowed.
    from llmbench.history.series import run_label
    labels = [run_label(p) for p in decode[0].series.points]
    assert labels[5:7] == ["6 c0ffeec", "7 c0ffeec+slow"]


def test_a_baselines_folder_with_one_environment_is_read_as_that_environment(tmp_path):
    _write_history(tmp_path / "tiny-cpu-float32", [1.0] * 8)
    proc = _llmbench(str(tmp_path), "-k", "decode", "--format", "markdown")
    assert proc.returncode == Exit.OK, proc.stderr
    assert "test_decode_steps[ctx=16]" in proc.stdout and "test_prefill" not in proc.stdout


@pytest.mark.parametrize("case, message", [
    ("too few", "holds 3 runs; a history needs at least 6"),
    ("mixed", "was measured in another environment"),
    ("damaged", "0004_run.json"),
    ("two environments", "holds runs of 2 environments"),
    ("no match", "matches -k"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, case, message):
    env = tmp_path / "tiny-cpu-float32"
    args = [str(env)]
    if case == "too few":
        _write_history(env, [1.0] * 3)
    else:
        _write_history(env, [1.0] * 8)
    if case == "mixed":
        run = make_run(99)
        run["llmbench"]["environment"]["threads"] = 1
        write_run(env / "0003_run.json", run)
    elif case == "damaged":
        (env / "0004_run.json").write_text("{not json")
    elif case == "two environments":
        _write_history(tmp_path / "tiny-cpu-bfloat16", [1.0] * 6)
        args = [str(tmp_path)]
    elif case == "no match":
        args += ["-k", "nothing-like-this"]
    proc = _llmbench(*args)
    assert proc.returncode == Exit.USAGE
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_trend_plots_are_drawn_once_and_never_overwritten_silently(tmp_path):
    env = tmp_path / "tiny-cpu-float32"
    _write_history(env, [1.0] * 6 + [1.3] * 6, seed=1)
    plots = tmp_path / "plots"
    proc = _llmbench(str(env), "--plot-dir", str(plots))
    assert proc.returncode == Exit.OK, proc.stderr
    drawn = sorted(p.name for p in plots.iterdir())
    assert drawn == ["history_all_benchmarks.png", "history_decode.png", "history_prefill.png"]
    assert all((plots / name).read_bytes().startswith(b"\x89PNG") for name in drawn)
    before = (plots / "history_decode.png").stat().st_mtime_ns
    again = _llmbench(str(env), "--plot-dir", str(plots))
    assert again.returncode == Exit.USAGE and "--force" in again.stderr
    assert (plots / "history_decode.png").stat().st_mtime_ns == before
    assert _llmbench(str(env), "--plot-dir", str(plots), "--force").returncode == Exit.OK
    assert _llmbench(str(env), "--force").returncode == Exit.USAGE


def test_judging_a_history_loads_no_engine_library(tmp_path):
    env = tmp_path / "tiny-cpu-float32"
    _write_history(env, [1.0] * 8)
    code = ("import sys; from llmbench import history; "
            f"history.judge_history(history.load_history({str(env)!r})); "
            "print(sorted(m for m in ('torch', 'transformers', 'fastapi') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert proc.stdout.strip() == "[]"


def test_the_spread_between_runs_of_one_code_is_shown_per_benchmark(tmp_path):
    """Six runs of one clean commit: each benchmark's spread between them (SD of log
    medians), as the table's column, the header's line and the JSON's field."""
    env = tmp_path / "tiny-cpu-float32"
    _write_history(env, [1.0] * 6)
    for path in sorted(env.glob("*.json")):  # one commit, clean: five A/A observations
        data = json.loads(path.read_text())
        data["commit_info"] = {"id": "a" * 40, "dirty": False}
        path.write_text(json.dumps(data))
    proc = _llmbench(str(env))
    assert proc.returncode == Exit.OK, proc.stderr
    assert "between runs of one code (SD of log medians, 5 A/A observations): median " \
           "benchmark" in proc.stdout
    assert "(5 A/A)" in proc.stdout
    report = json.loads(_llmbench(str(env), "--format", "json").stdout)
    spreads = [b["between_runs"] for b in report["benchmarks"]]
    assert all(s["aa_observations"] == 5 and 0 < s["sd_log"] < 0.2 for s in spreads)


def test_runs_of_different_code_have_no_spread_between_runs_yet(tmp_path):
    env = tmp_path / "tiny-cpu-float32"
    _write_history(env, [1.0] * 6)  # every run its own commit
    proc = _llmbench(str(env))
    assert "between runs: not measured yet" in proc.stdout
