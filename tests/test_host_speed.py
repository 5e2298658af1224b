"""The machine's speed divided out of a stored comparison (`gate.host_speed`).

Seeded synthetic runs on a host whose speed moves from run to run: the control workload
feels the whole move and every benchmark a planted power of it. The saved runs of one code
must show that power, the noise left once it is divided out must be smaller, and a stored
comparison must then neither blame the code for the host nor let the host hide the code.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from gate_runs import make_run

from llmbench import gate
from llmbench.gate import host_speed, noise
from llmbench.gate.stats import Verdict
from llmbench.runs import Run, run_from_json

A, B, HISTORY = "a" * 40, "b" * 40, "c" * 40
SLOPE = 0.8  # how much of the host's move the planted benchmarks feel


def _run(seed: int, commit: str, host: float = 1.0, code: dict | None = None) -> Run:
    """One run on a host `host` times slower (the control feels all of it, the benchmarks
    its SLOPE power), of code slower by `code` ({group: factor})."""
    factors = {group: host ** SLOPE * (code or {}).get(group, 1.0)
               for group in ("prefill", "decode")}
    data = make_run(seed, factors=factors, control_factor=host)
    data["commit_info"] = {"id": commit, "dirty": False}
    return run_from_json(data, f"run{seed}")


def _drifting(count: int = 10, spread: float = 0.06) -> list[Run]:
    """Runs of one commit on a host whose speed moves by `spread` (log sd) from run to run."""
    hosts = np.exp(np.random.default_rng(11).normal(0, spread, count))
    return [_run(500 + i, HISTORY, host) for i, host in enumerate(hosts)]


def _verdicts(result) -> dict[str, Verdict]:
    return {c.name.split("::")[1]: c.verdict for c in result.comparisons}


def test_the_saved_runs_fit_the_power_at_which_benchmarks_follow_the_control():
    history = _drifting()
    adjusted = noise.estimate_noise(history, adjust=True)
    assert adjusted.slope == pytest.approx(SLOPE, abs=0.15)
    raw = noise.estimate_noise(history)
    assert raw.slope == 0.0 and raw.control is None
    # The host's share removed, what is left is the rounds' own noise and the control's.
    for key, spread in adjusted.spreads.items():
        assert spread.own_sigma < raw.spreads[key].own_sigma / 2
    assert adjusted.control.sigma == pytest.approx(0.06, rel=0.5)


def test_the_slope_needs_enough_runs_and_a_control_the_benchmarks_follow():
    # Two runs of one code are one A/A observation: too few to fit anything.
    assert noise.estimate_noise(_drifting(count=2), adjust=True).slope == 0.0
    assert noise.estimate_noise(_drifting(), adjust=True, slope=1.0).slope == 1.0
    # A host whose moves the control never feels: a slope fitted on its noise alone would
    # add that noise to every ratio, so nothing is divided out.
    still = [dataclasses.replace(run, control_s=_run(700 + i, HISTORY).control_s)
             for i, run in enumerate(_drifting())]
    result = gate.compare_runs(_run(1, A), _run(2, B), history=still)
    assert not result.host.divided_out
    assert result.host.why == ("not divided out: the benchmarks do not follow it between "
                               "runs of one code")


def test_a_slower_host_is_not_blamed_on_same_speed_code():
    history = _drifting()
    baseline, candidate = _run(1, A, host=0.94), _run(2, B, host=1.06)
    options = gate.GateOptions(threshold=0.05)
    blind = [dataclasses.replace(run, control_s=()) for run in history]
    raw = gate.compare_runs(baseline, candidate, history=blind, options=options)
    assert not raw.host.divided_out
    assert set(_verdicts(raw).values()) == {Verdict.NOT_CONFIRMED}  # the host's 10%, as slower
    result = gate.compare_runs(baseline, candidate, history=history, options=options)
    assert result.host.divided_out and result.host.slope == pytest.approx(SLOPE, abs=0.15)
    assert not {Verdict.REGRESSION, Verdict.NOT_CONFIRMED} & set(_verdicts(result).values())
    text = gate.render_text(result)
    assert "divided out to the power 0." in text
    assert "A/A observations, the machine's speed divided out); a stored comparison" in text
    data = json.loads(gate.render(result, "json"))
    assert data["host"]["slope"] == result.host.slope > 0
    assert data["host"]["factor"] == pytest.approx(data["host"]["control_ratio"] ** data[
        "host"]["slope"])


def test_a_faster_host_does_not_hide_a_slower_decode():
    history = _drifting()
    # The code's decode 25% slower, measured on a host 12% faster.
    baseline, candidate = _run(1, A), _run(2, B, host=0.89, code={"decode": 1.25})
    result = gate.compare_runs(baseline, candidate, history=history)
    assert result.host.divided_out
    verdicts = _verdicts(result)
    assert {verdicts["test_decode_steps[ctx=16]"], verdicts["test_decode_steps[ctx=128]"]} \
        == {Verdict.REGRESSION}
    assert Verdict.REGRESSION not in {verdicts["test_prefill[in=32]"],
                                      verdicts["test_prefill[in=128]"]}


def test_a_control_moved_beyond_the_hosts_drift_is_not_divided_out():
    # Code that slows the control with every benchmark (a thread setting, a spinning pool)
    # would hide its own slowdown if the control's move were taken for the host's.
    baseline, candidate = _run(1, A), _run(2, B, host=1.6)
    result = gate.compare_runs(baseline, candidate, history=_drifting())
    assert not result.host.divided_out and result.host.factor == 1.0
    assert "moved beyond the x1." in result.host.why
    assert "that runs of one code move it by (99%), so the code may have moved it too" \
        in result.host.why
    assert Verdict.REGRESSION in _verdicts(result).values()


def test_without_control_samples_or_history_nothing_is_divided_out():
    bare = make_run(2)
    bare["commit_info"] = {"id": B, "dirty": False}
    bare["llmbench"]["control_s"] = []
    host, estimate = host_speed.divide_out(None, _drifting(), normalize=False)
    assert host is None and estimate.slope == 0.0
    result = gate.compare_runs(_run(1, A), run_from_json(bare, "bare"), history=_drifting())
    assert result.host is None
    result = gate.compare_runs(_run(1, A), _run(2, B, host=1.05), history=_drifting(count=2))
    assert result.host.why.startswith("not divided out: too few saved runs of one code")
    assert "--normalize divides it out in full" in gate.render_text(result)


def test_normalize_divides_the_whole_move_and_measures_the_noise_the_same_way():
    baseline, candidate = _run(1, A), _run(2, B, host=1.05)
    result = gate.compare_runs(baseline, candidate, history=_drifting(),
                               options=gate.GateOptions(normalize=True))
    assert result.host.slope == 1.0 and result.noise.slope == 1.0
    assert result.host.why == "divided out in full (--normalize)"
