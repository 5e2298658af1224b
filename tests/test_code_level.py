"""The baseline's code level (`gate.code_level`): a stored comparison tests the candidate
against every saved run of the baseline's code, not against one of them.

Seeded synthetic runs whose every benchmark lands, run after run, at its own draw around its
code's level (a process settles into a state; the rounds cannot see which). The baseline's
level over k runs must be their mean, read as the noise is read; the test against the noise
between runs must then carry sigma * sqrt(1 + 1/k), not sigma * sqrt(2); and a real slowdown
too small to call against one baseline run must be called against its code's level, with
same-speed code and untouched benchmarks still not flagged.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from gate_runs import BENCHMARKS, make_run, write_run
from scipy import stats

from llmbench import gate
from llmbench.gate import code_level, noise
from llmbench.gate.stats import Verdict
from llmbench.runs import Run, run_from_json
from llmbench.runs.model import median
from llmbench.runs.store import load_run

BASE, OTHER, CANDIDATE = "a" * 40, "c" * 40, "b" * 40
PROCESS_SPREAD = 0.03  # log sd of a run's level around its code's, per benchmark


def _run(seed: int, commit: str, code: dict | None = None, host: float = 1.0,
         feel: float = 1.0) -> Run:
    """A run of `commit` (slower by `code`: {group or name: factor}) whose benchmarks each
    land at their own draw around the code's level, on a host `host` times slower (the
    control feels all of it, the benchmarks its `feel` power)."""
    code = code or {}
    draws = np.exp(np.random.default_rng(seed).normal(0.0, PROCESS_SPREAD, len(BENCHMARKS)))
    factors = {name: host ** feel * draw * code.get(name, code.get(group, 1.0))
               for (name, group), draw in zip(BENCHMARKS.items(), draws, strict=True)}
    data = make_run(seed, factors=factors, control_factor=host)
    data["commit_info"] = {"id": commit, "dirty": False}
    return run_from_json(data, f"run{seed}")


def _history(base_runs: int) -> list[Run]:
    """Eight runs of other code (they measure the noise) and `base_runs` of the baseline's,
    the baseline (seed 100) first among them, as the store holds it."""
    return ([_run(100 + i, BASE) for i in range(base_runs)]
            + [_run(300 + i, OTHER) for i in range(8)])


def _key(run: Run, short: str) -> str:
    return next(key for key in run.benchmarks if key.endswith(short))


def test_the_level_is_the_mean_of_the_code_runs_each_read_once():
    history = _history(5)
    baseline = history[0]
    keys = list(baseline.benchmarks)
    levels = code_level.code_levels(baseline, history, keys)
    assert {level.runs for level in levels.values()} == {5}  # the baseline counted once
    for key in keys:
        logs = [math.log(float(np.median(run.benchmarks[key].samples))) for run in history[:5]]
        assert levels[key].shift == pytest.approx(logs[0] - sum(logs) / 5)
    # Alone, or with code it did not measure, the baseline is its own level: no entry.
    assert code_level.code_levels(baseline, history[5:], keys) == {}
    dirty = dataclasses.replace(baseline, commit_info={"id": BASE, "dirty": True})
    assert code_level.code_levels(dirty, history, keys) == {}


def test_the_level_reads_each_run_as_the_noise_reads_it():
    baseline = _run(100, BASE)
    slower_host = _run(100, BASE, host=1.2)  # the same draws, on a host 20% slower
    key = _key(baseline, "test_decode_steps[ctx=16]")
    # The machine's speed left in, the slower host lowers the baseline below its level;
    # divided out in full, the two runs are one level.
    left_in = code_level.code_levels(baseline, [slower_host], [key])[key]
    assert left_in.shift == pytest.approx(-math.log(1.2) / 2, abs=1e-9)
    divided = code_level.code_levels(baseline, [slower_host], [key], slope=1.0)[key]
    assert divided.shift == pytest.approx(0.0, abs=1e-9)
    # Other work than the baseline's (another profile) and a benchmark whose every round
    # other work disturbed are not runs of its level.
    other_shape = run_from_json(_json(101, BASE, output_tokens=32), "other shape")
    disturbed = dataclasses.replace(_run(102, BASE), benchmarks={
        k: dataclasses.replace(b, all_disturbed=True)
        for k, b in _run(102, BASE).benchmarks.items()})
    assert code_level.code_levels(baseline, [other_shape, disturbed], [key]) == {}
    # Dividing the machine's speed out needs a run's control: one without is no run of the
    # divided level, and is one of the level left in.
    blind = dataclasses.replace(_run(103, BASE), control_s=())
    assert code_level.code_levels(baseline, [slower_host, blind], [key], slope=1.0)[key] \
        .runs == 2
    assert code_level.code_levels(baseline, [slower_host, blind], [key])[key].runs == 3


def test_a_copy_of_the_baseline_is_one_run_of_its_level(tmp_path):
    folder = tmp_path / "smollm2-135m-cpu-float32"
    saved = [write_run(folder / f"000{i}_{BASE[:8]}.json", _json(100 + i, BASE, 10))
             for i in (1, 2)]
    copy = write_run(tmp_path / "b.json", json.loads(saved[0].read_text()))
    baseline = load_run(copy)
    history = [load_run(path) for path in saved] + [load_run(saved[0])]  # read twice
    key = next(iter(baseline.benchmarks))
    assert code_level.code_levels(baseline, history, [key])[key].runs == 2


def _json(seed: int, commit: str, output_tokens: int) -> dict:
    data = make_run(seed)
    data["commit_info"] = {"id": commit, "dirty": False}
    for entry in data["benchmarks"]:
        entry["extra_info"] = {"output_tokens": output_tokens}
    return data


def test_k_runs_of_the_baseline_code_narrow_the_test_to_sqrt_of_one_plus_one_over_k():
    spread = noise.Spread(sigma=0.03, df=20.0, own_sigma=0.03, own_df=20)
    alone = noise.between_runs({"x": 1.1}, {"x": spread}, {"x": 0.05}, 0.99)["x"]
    level = noise.between_runs({"x": 1.1}, {"x": spread}, {"x": 0.05}, 0.99,
                               {"x": code_level.Level(shift=-0.02, runs=6)})["x"]
    assert (alone.ratio, alone.level_runs) == (pytest.approx(1.1), 1)
    assert (level.ratio, level.level_runs) == (pytest.approx(1.1 * math.exp(-0.02)), 6)
    assert (math.log(level.smallest_regression / 1.05)
            == pytest.approx(math.log(alone.smallest_regression / 1.05)
                             * math.sqrt((1 + 1 / 6) / 2)))
    d, se = math.log(1.1) - 0.02, 0.03 * math.sqrt(1 + 1 / 6)
    q = stats.t.ppf(0.995, 20)
    assert (level.ci_low, level.ci_high) == (pytest.approx(math.exp(d - q * se)),
                                             pytest.approx(math.exp(d + q * se)))
    assert level.p_value == pytest.approx(2 * stats.t.sf(d / se, 20))


def test_the_level_divides_each_run_by_its_control_to_the_fitted_power():
    hosts = np.exp(np.random.default_rng(5).normal(0.0, 0.06, 8))
    history = ([_run(100 + i, BASE, host=h, feel=0.8) for i, h in enumerate(hosts)]
               + [_run(300 + i, OTHER, host=h, feel=0.8) for i, h in enumerate(hosts[::-1])])
    baseline, candidate = history[0], _run(900, CANDIDATE, host=1.02, feel=0.8)
    result = gate.compare_runs(baseline, candidate, history=history)
    power = result.host.slope
    assert 0 < power < 1

    def divided(run: Run, key: str) -> float:
        return (math.log(median(run.benchmarks[key].samples))
                - power * math.log(median(run.control_s)))

    for key, between in result.between.items():
        level = sum(divided(run, key) for run in history[:8]) / 8
        assert between.level_runs == 8
        assert between.ratio == pytest.approx(math.exp(divided(candidate, key) - level))


def test_the_interval_against_the_level_covers_same_speed_code_at_its_confidence():
    # The mean of k runs is one draw's noise over sqrt(k) from its code's level: an interval
    # over sigma * sqrt(1 + 1/k) covers a same-speed candidate as often as its confidence
    # says (sqrt(2) would cover nearly always, sigma / sqrt(k) about half the time).
    history = _history(8)
    covered = []
    for seed in range(2000, 2300):
        result = gate.compare_runs(history[0], _run(seed, CANDIDATE), history=history)
        covered += [b.ci_low <= 1 <= b.ci_high for b in result.between.values()]
    assert 0.82 <= sum(covered) / len(covered) <= 0.95


def _verdicts(result) -> dict[str, Verdict]:
    return {c.name.split("::")[1]: c.verdict for c in result.comparisons}


FLAGGED = {Verdict.REGRESSION, Verdict.NOT_CONFIRMED}


def test_a_slowdown_one_baseline_run_cannot_call_is_called_against_its_code_level():
    candidate = _run(900, CANDIDATE, code={"decode": 1.12})
    options = gate.GateOptions(threshold=0.05)
    history = _history(8)
    alone = gate.compare_runs(history[0], candidate, options,
                              history=[history[0]] + history[8:])
    level = gate.compare_runs(history[0], candidate, options, history=history)
    assert {b.level_runs for b in alone.between.values()} == {1}
    assert {b.level_runs for b in level.between.values()} == {8}
    median = sorted(b.smallest_regression for b in level.between.values())[2]
    assert median < sorted(b.smallest_regression for b in alone.between.values())[2]
    decode = {"test_decode_steps[ctx=16]", "test_decode_steps[ctx=128]"}
    assert {name for name, v in _verdicts(level).items() if v is Verdict.REGRESSION} == decode
    assert not FLAGGED & {v for name, v in _verdicts(level).items() if name not in decode}
    assert decode - {name for name, v in _verdicts(alone).items() if v is Verdict.REGRESSION}
    text = gate.render_text(level)
    assert f"against 8 saved runs of {BASE[:8]}), smaller changes need" in text
    assert all("against its code's 8 saved runs" in c.reason for c in level.comparisons
               if c.verdict is Verdict.REGRESSION)
    data = json.loads(gate.render(level, "json"))
    assert {b["level_runs"] for b in data["between"].values()} == {8}


def test_same_speed_code_is_not_flagged_against_its_baseline_code_level():
    options = gate.GateOptions(threshold=0.05)
    history = _history(8)
    for seed in range(901, 911):
        result = gate.compare_runs(history[0], _run(seed, CANDIDATE), options,
                                   history=history)
        # A stored flag ("not confirmed") asks the paired A/B; a stored regression would
        # be a verdict the level got wrong.
        assert Verdict.REGRESSION not in _verdicts(result).values(), seed
