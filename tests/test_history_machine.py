"""History on a machine that drifts: each benchmark is judged after removing what it shares
with the rest of its run, and all benchmarks together are judged on their own.

Synthetic run files, as in test_history: every run gets one machine factor shared by all of
its benchmarks and its control workload, and a small draw of its own per benchmark.
"""

from __future__ import annotations

import json

import numpy as np
from gate_runs import make_run, write_run

from llmbench import history
from llmbench.errors import Exit
from llmbench.history.machine import all_benchmarks, machine_shares

BENCHMARKS = {  # five, as the quick selection on smollm2 has
    "test_prefill[in=32]": "prefill",
    "test_prefill[in=128]": "prefill",
    "test_prefill[in=512]": "prefill",
    "test_decode_steps[ctx=16]": "decode",
    "test_decode_steps[ctx=128]": "decode",
}
COMMIT = "c0ffee" * 6


def _write(folder, machine: list[float], *, code: dict[str, list[float]] | None = None,
           control: list[float] | None = None, own_sd: float = 0.02, seed: int = 0,
           commits: list[str] | None = None) -> None:
    """Run i: every benchmark x machine[i] x code[group][i] x its own draw; the control
    x control[i] (by default the machine's factor: the control feels the machine only)."""
    rng = np.random.default_rng(seed)
    control = machine if control is None else control
    for i, speed in enumerate(machine):
        factors = {name: speed * (code or {}).get(group, [1.0] * len(machine))[i]
                   * float(np.exp(rng.normal(0.0, own_sd))) for name, group in BENCHMARKS.items()}
        run = make_run(seed * 100 + i, factors=factors, benchmarks=BENCHMARKS,
                       control_factor=control[i])
        run["commit_info"]["id"] = (commits or [COMMIT] * len(machine))[i]
        write_run(folder / f"{i + 1:04d}_run.json", run)


def _drift(n: int, seed: int) -> list[float]:
    """A machine that wanders by ~8% from run to run and slides 30% over the history."""
    rng = np.random.default_rng(seed)
    return list(np.exp(np.cumsum(rng.normal(0.0, 0.05, n)) + np.linspace(0.0, 0.26, n)))


def test_benchmarks_that_move_with_the_machine_follow_it_and_lose_its_moves(tmp_path):
    env = tmp_path / "tiny-cpu-float32"
    _write(env, _drift(16, seed=3))
    h = history.load_history(env)
    shares = machine_shares(h)
    assert all(share.beta > 0.8 for share in shares.values()), shares
    for series in h.series:
        raw = series.log_medians
        left = raw - shares[series.key].moves
        assert np.std(left) < np.std(raw) / 2, series.name


def test_benchmarks_that_do_not_move_together_are_left_as_they_are(tmp_path):
    env = tmp_path / "tiny-cpu-float32"
    _write(env, [1.0] * 16, own_sd=0.08, control=[1.0] * 16)
    shares = machine_shares(history.load_history(env))
    assert all(share.beta < 0.5 for share in shares.values()), shares


def test_a_drifting_machine_shows_no_change_point_and_no_regression(tmp_path):
    found = 0
    for seed in range(6):
        env = tmp_path / f"h{seed}" / "tiny-cpu-float32"
        _write(env, _drift(16, seed=seed), seed=seed)
        result = history.judge_history(history.load_history(env))
        found += sum(len(r.shifts) for r in (*result.results, result.machine))
        assert result.exit_code == Exit.OK, seed
    assert found == 0


def test_the_same_drift_judged_one_benchmark_at_a_time_shows_change_points(tmp_path):
    # The premise of the module: without removing the machine's share, drift is a shift.
    from llmbench.history.changepoints import find_shifts

    found = 0
    for seed in range(6):
        env = tmp_path / f"h{seed}" / "tiny-cpu-float32"
        _write(env, _drift(16, seed=seed), seed=seed)
        found += sum(bool(find_shifts(s.log_medians, alpha=0.05, benchmarks=6, threshold=0.1))
                     for s in history.load_history(env).series)
    assert found >= 6


def _code_change_at_run_7(tmp_path, group: str, factor: float, seed: int):
    """12 runs on a drifting machine; from run 7 on, a new commit scales `group`."""
    env = tmp_path / "tiny-cpu-float32"
    _write(env, _drift(12, seed=seed), code={group: [1.0] * 6 + [factor] * 6}, seed=seed,
           commits=["a" * 40] * 6 + ["b" * 40] * 6)
    return history.judge_history(history.load_history(env))


def test_code_that_slows_decode_on_a_drifting_machine_is_found_at_its_run(tmp_path):
    result = _code_change_at_run_7(tmp_path, "decode", 1.2, seed=11)
    for r in result.results:
        at = [r.shift_run(s) for s in r.shifts]
        if r.series.group == "decode":
            assert at == [7] and r.code_changed(r.shifts[0]) is True, (r.series.name, at)
        else:
            assert at == [], (r.series.name, at)
    assert result.machine.shifts == () and result.exit_code == Exit.OK


def test_a_machine_step_the_control_feels_too_is_no_change_point_anywhere(tmp_path):
    env = tmp_path / "tiny-cpu-float32"
    _write(env, [1.0] * 6 + [1.3] * 6)
    result = history.judge_history(history.load_history(env))
    assert all(r.shifts == () for r in (*result.results, result.machine))
    assert result.machine.beta > 0.8 and result.exit_code == Exit.OK


def test_a_step_of_every_benchmark_the_control_misses_is_all_benchmarks_together(tmp_path):
    env = tmp_path / "tiny-cpu-float32"
    _write(env, [1.0] * 6 + [1.3] * 6, control=[1.0] * 12)
    result = history.judge_history(history.load_history(env))
    assert all(r.shifts == () for r in result.results)
    (step,) = result.machine.shifts
    assert result.machine.shift_run(step) == 7 and 1.2 < step.ratio < 1.4
    assert result.machine.code_changed(step) is False
    assert 0.95 < result.control_move(step) < 1.05
    text = history.render(result, "text")
    assert "all benchmarks together" in text and "same commit around it, control x" in text


def test_code_that_speeds_up_most_benchmarks_leaves_the_others_alone(tmp_path):
    # Their reference (the median of the others) moves with the code, so without the check
    # against the measured medians the untouched decode benchmarks would show it mirrored.
    result = _code_change_at_run_7(tmp_path, "prefill", 0.7, seed=5)
    for r in result.results:
        if r.series.group == "decode":
            assert r.shifts == () and r.newest.word == "consistent", r.series.name
    assert result.exit_code == Exit.OK


def test_code_that_slows_everything_is_still_a_regression_and_the_control_says_code(tmp_path):
    env = tmp_path / "tiny-cpu-float32"
    everything = {group: [1.0] * 11 + [1.4] for group in ("prefill", "decode")}
    _write(env, [1.0] * 12, code=everything)
    result = history.judge_history(history.load_history(env))
    # Each benchmark's move is shared by all the others, so it is removed from each...
    assert all(r.newest.word == "consistent" for r in result.results)
    # ...and all benchmarks together, which the control did not follow, carry it.
    assert result.machine.newest.verdict == "regression"
    assert result.exit_code == Exit.REGRESSION
    assert 0.95 < result.control_newest() < 1.05  # the machine did not do it


def test_json_gives_each_benchmarks_share_and_all_benchmarks_together(tmp_path):
    env = tmp_path / "tiny-cpu-float32"
    _write(env, [1.0] * 6 + [1.3] * 6, control=[1.0] * 12)
    result = history.judge_history(history.load_history(env))
    report = json.loads(history.render(result, "json"))
    assert report["exit_code"] == Exit.OK
    assert all(0.8 < b["follows_machine"] <= 1.0 for b in report["benchmarks"])
    (step,) = report["all_benchmarks"]["change_points"]
    assert step["run"] == 7 and step["code_changed"] is False
    assert 0.95 < step["control_ratio"] < 1.05


def test_too_few_benchmarks_leave_every_series_as_it_is(tmp_path):
    env = tmp_path / "tiny-cpu-float32"
    for i in range(8):
        run = make_run(i, benchmarks={"test_decode_steps[ctx=16]": "decode",
                                      "test_prefill[in=32]": "prefill"})
        del run["llmbench"]["control_s"]  # no control either
        write_run(env / f"{i + 1:04d}_run.json", run)
    h = history.load_history(env)
    assert all(s.beta == 0.0 and not s.moves.any() for s in machine_shares(h).values())
    assert all_benchmarks(h) is None


def test_a_run_without_enough_references_leaves_the_series_as_it_is(tmp_path):
    # Three benchmarks and a control: the newest run lacks the control, so its reference
    # would be a median of two. Rather than judge it raw beside runs judged without the
    # machine's share, no share is removed from any run.
    env = tmp_path / "tiny-cpu-float32"
    three = dict(list(BENCHMARKS.items())[2:])
    for i, speed in enumerate(_drift(10, seed=2)):
        run = make_run(i, factors={name: speed for name in three}, benchmarks=three,
                       control_factor=speed)
        if i == 9:
            del run["llmbench"]["control_s"]
        write_run(env / f"{i + 1:04d}_run.json", run)
    h = history.load_history(env)
    assert all(s.beta == 0.0 and not s.moves.any() for s in machine_shares(h).values())
