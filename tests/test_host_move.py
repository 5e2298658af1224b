"""The machine's move measured by a confirmation's pairs clears the candidates its budget left
out, and never a real slowdown (`gate.host_move`)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from gate_runs import make_run

from llmbench.errors import Exit
from llmbench.gate import compare, host_move, noise, pipeline, render_text, stored
from llmbench.gate.confirmation import Confirmation
from llmbench.gate.stats import Verdict
from llmbench.runs import run_from_json

PREFILL = {f"test_prefill[in={n}]": "prefill" for n in (8, 16, 32, 64, 128, 256)}
DECODE = {f"test_decode_steps[ctx={n}]": "decode" for n in (8, 16, 32, 64, 128, 256)}
BENCHMARKS = {**PREFILL, **DECODE}
FULL = "benchmarks/test_prefill_decode.py::"


def _run(seed: int, commit: str, factors: dict[str, float], label: str):
    data = make_run(seed, factors=factors, benchmarks=BENCHMARKS)
    data["commit_info"]["id"] = commit
    return run_from_json(data, label)


def _history(runs: int = 8, host_sd: float = 0.06, seed: int = 40):
    """Runs of one commit on a host whose speed swings from run to run (every benchmark
    moves together), each benchmark's own noise only its rounds'."""
    rng = np.random.default_rng(seed)
    moves = [math.exp(rng.normal(0, host_sd)) for _ in range(runs)]
    return [_run(seed + i, "c" * 40, {"prefill": move, "decode": move}, f"history {i}")
            for i, move in enumerate(moves)]


def test_the_residual_noise_is_what_is_left_once_each_runs_shared_move_is_removed():
    estimate = noise.estimate_noise(_history())
    total = np.median([s.own_sigma for s in estimate.spreads.values()])
    residual = np.median([s.own_sigma for s in estimate.residuals.values()])
    assert total > 0.03  # the host's swing
    assert residual < total / 3  # the rounds' own noise, a median of ten
    assert set(estimate.residuals) == set(estimate.spreads)


def test_without_a_shared_move_the_residual_noise_is_the_spread_less_the_shared_df():
    estimate = noise.estimate_noise(_history(host_sd=0.0))
    for key, spread in estimate.spreads.items():
        assert estimate.residuals[key].own_sigma == pytest.approx(spread.own_sigma, rel=0.5)


def _pairs(rng, factor: float, n: int = 8, sd: float = 0.01) -> tuple[list, list]:
    base = [0.1 * math.exp(rng.normal(0, sd)) for _ in range(n)]
    return base, [b * factor * math.exp(rng.normal(0, sd)) for b in base]


def _runner(code: dict[str, float], reach: int, seed: int = 3,
            undecided: frozenset[str] = frozenset()):
    """Stands for the suite's paired A/B: pairs the first `reach` candidates it is asked
    for, each `code[name]` slower on the candidate side (the code's effect alone: pairs see
    no host move), and judges them as the A/B would (those in `undecided` it leaves
    inconclusive, as a family member not named); the rest it leaves out."""
    asked_for = []

    def pair(asked: pipeline.Request):
        asked_for.append(asked)
        rng = np.random.default_rng(seed)
        records, comparisons = [], []
        screened = asked_for_screen[0]
        for name in list(asked.keys)[:reach]:
            factor = code.get(name.split("::")[1], 1.0)
            b, c = _pairs(rng, factor)
            records.append({"name": name, "threshold": 0.10, "baseline": b, "candidate": c})
            stored_c = next(x for x in screened.comparisons if x.name == name)
            verdict = Verdict.REGRESSION if factor > 1.1 else Verdict.UNCHANGED
            if name.split("::")[1] in undecided:
                verdict = Verdict.INCONCLUSIVE
            comparisons.append(dataclasses.replace(
                stored_c, verdict=verdict,
                ratio=factor, ci_low=factor * 0.97, ci_high=factor * 1.03, n_pairs=len(b),
                reason="paired"))
        return dataclasses.replace(screened, comparisons=tuple(comparisons), code=None,
                                   pairing={"benchmarks": records})

    asked_for_screen: list = []
    return pair, asked_for_screen


def _confirmed(host: float | dict[str, float], code: dict[str, float], reach: int = 6,
               history=None, pairs_code: dict[str, float] | None = None,
               undecided: frozenset[str] = frozenset()):
    """`code` slows the candidate run's benchmarks, and their pairs unless `pairs_code`
    says what the pairs see."""
    history = _history() if history is None else history
    base = _run(100, "a" * 40, {}, "baseline")
    moves = host if isinstance(host, dict) else {name: host for name in BENCHMARKS}
    cand = _run(200, "b" * 40, {name: moves[name] * code.get(name, 1.0)
                                for name in BENCHMARKS}, "candidate")
    screened = compare.screen_runs(base, cand, None, history)
    pair, screen_slot = _runner(code if pairs_code is None else pairs_code, reach,
                                undecided=undecided)
    screen_slot.append(screened)
    return screened, pipeline.confirm(screened, pair, budget_s=240)


def _verdicts(result) -> dict[str, Verdict]:
    return {c.name.split("::")[1]: c.verdict for c in result.comparisons}


def test_a_host_a_third_slower_leaves_nothing_not_confirmed_that_its_move_explains():
    screened, result = _confirmed(host=1.3, code={})
    assert sum(v is Verdict.NOT_CONFIRMED for v in _verdicts(screened).values()) == 12
    moved = result.confirmation.host_move
    assert moved.ratio == pytest.approx(1.3, rel=0.03) and len(moved.readings) == 6
    assert set(moved.cleared) == set(result.confirmation.left) and len(moved.cleared) == 6
    verdicts = _verdicts(result)
    assert Verdict.NOT_CONFIRMED not in verdicts.values()
    left = [c for c in result.comparisons if c.name in result.confirmation.left]
    assert all(c.verdict is Verdict.NOT_SLOWER for c in left)
    assert "over the machine's move x1.3" in left[0].reason
    assert "measured by the paired A/B on other benchmarks" in left[0].reason
    assert result.exit_code == Exit.OK


def test_a_real_slowdown_left_without_pairs_is_never_cleared_by_the_move():
    """Decode 25% slower in the code, the host a third slower, and the budget pairs only
    prefill: the move is read on prefill, and decode's stored ratio is beyond it."""
    code = dict.fromkeys(DECODE, 1.25)
    _, result = _confirmed(host=1.3, code=code)
    assert set(result.confirmation.left) == {FULL + name for name in DECODE}
    assert result.confirmation.host_move.ratio == pytest.approx(1.3, rel=0.03)
    assert result.confirmation.host_move.cleared == ()
    verdicts = _verdicts(result)
    assert {verdicts[name] for name in DECODE} == {Verdict.NOT_CONFIRMED}
    assert result.exit_code == Exit.NOT_CONFIRMED


def test_the_pairs_carry_a_uniform_slowdown_so_the_move_does_not():
    """The code 25% slower everywhere on a host that did not move: pairs on prefill see the
    slowdown, the move is 1, and decode (left out) stays not confirmed."""
    code = dict.fromkeys(BENCHMARKS, 1.25)
    _, result = _confirmed(host=1.0, code=code)
    assert result.confirmation.host_move.ratio == pytest.approx(1.0, abs=0.03)
    assert result.confirmation.host_move.cleared == ()
    assert result.exit_code == Exit.REGRESSION


def test_readings_that_disagree_widen_every_interval_and_clear_less():
    """The move not one factor for all: prefill's readings scatter (x1.15 to x1.45), so
    their excess scatter (tau) joins every candidate's interval and fewer are cleared than
    with agreeing readings."""
    spread = dict(zip(PREFILL, (1.15, 1.45, 1.2, 1.4, 1.25, 1.35), strict=True))
    _, agree = _confirmed(host=1.3, code={})
    _, disagree = _confirmed(host={**spread, **dict.fromkeys(DECODE, 1.3)}, code={})
    tau = disagree.confirmation.host_move.tau
    assert agree.confirmation.host_move.tau < 0.01 < 0.05 < tau
    for name, c in disagree.confirmation.host_move.judged.items():
        # The interval's half-width in log units is at least t * tau.
        assert math.log(c.ci_high / c.ci_low) / 2 > 1.9 * tau, name
    assert len(disagree.confirmation.host_move.cleared) < len(agree.confirmation.host_move.cleared)


def test_a_slowdown_just_past_the_threshold_left_without_pairs_is_not_cleared():
    code = dict.fromkeys(DECODE, 1.13)
    _, result = _confirmed(host=1.3, code=code)
    judged = result.confirmation.host_move.judged
    assert {FULL + name for name in DECODE} == set(judged)
    assert all(not c.not_slower and c.ratio > 1.1 for c in judged.values())


def test_a_paired_candidate_the_ab_left_undecided_is_held_back_by_its_own_pairs():
    """Its stored ratio is only the host's move, but its pairs point past the threshold:
    judged on both, against a move read without it, it is not cleared; with pairs at the
    same speed it is, and its own reading is left out of the move it is judged against."""
    name = "test_prefill[in=8]"
    slow_pairs = {name: 1.2}
    _, held = _confirmed(host=1.3, code={}, pairs_code=slow_pairs,
                         undecided=frozenset({name}))
    own = held.confirmation.host_move.judged[FULL + name]
    assert not own.not_slower and own.ratio > 1.1
    assert _verdicts(held)[name] is not Verdict.NOT_SLOWER
    # The move it was judged against is the other five readings' (x1.3); its own reading
    # (stored x1.3 over paired x1.2) would have pulled it to about x1.26.
    assert own.move == pytest.approx(1.3, rel=0.012)
    _, same = _confirmed(host=1.3, code={}, undecided=frozenset({name}))
    own = same.confirmation.host_move.judged[FULL + name]
    assert own.not_slower and _verdicts(same)[name] is Verdict.NOT_SLOWER


def test_fewer_readings_than_three_measure_no_move():
    _, result = _confirmed(host=1.3, code={}, reach=2)
    assert result.confirmation.host_move is None
    assert Verdict.NOT_CONFIRMED in _verdicts(result).values()


def test_without_measured_residual_noise_no_move_is_measured():
    _, result = _confirmed(host=1.3, code={}, history=[])
    assert result.confirmation.host_move is None


def test_the_saved_move_settles_the_same_verdicts_when_read_back():
    screened, result = _confirmed(host=1.3, code=dict.fromkeys(list(DECODE)[:3], 1.25))
    saved = Confirmation.from_json(result.confirmation.to_json())
    assert saved.host_move == result.confirmation.host_move
    again = stored.settle_by(screened.comparisons, saved)
    assert [c.verdict for c in again] == [c.verdict for c in result.comparisons]
    assert [c.reason for c in again] == [c.reason for c in result.comparisons]


def test_a_damaged_saved_move_clears_nothing():
    screened, result = _confirmed(host=1.3, code={})
    data = result.confirmation.to_json()
    data["host_move"]["judged"] = {name: {"ratio": "x"} for name in data["host_move"]["judged"]}
    assert Confirmation.from_json(data).host_move.cleared == ()
    for damage in ({"ratio": [1]}, {"ratio": "x"}, {"readings": "abc"}, {"ratio": None}):
        data = result.confirmation.to_json()
        data["host_move"].update(damage)
        assert Confirmation.from_json(data).host_move is None, damage
    # An interval edited past the threshold clears nothing, whatever its flag says.
    data = result.confirmation.to_json()
    for entry in data["host_move"]["judged"].values():
        entry["ci_high"] = 1.2
    again = stored.settle_by(screened.comparisons, Confirmation.from_json(data))
    assert Verdict.NOT_SLOWER not in {c.verdict for c in again
                                      if c.name in result.confirmation.left}


def test_the_move_and_a_prediction_for_one_more_benchmark():
    readings = [host_move.Reading(str(i), math.log(1.3), 1e-4, 0.0, 1e-6) for i in range(4)]
    move = host_move.measure(readings)
    assert move.ratio == pytest.approx(1.3) and move.tau2 == 0.0 and move.df == 3
    spread = noise.Spread(sigma=0.01, df=20, own_sigma=0.01, own_df=20)
    assert host_move.clear(1.3, spread, move, 0.10, 0.05).not_slower
    assert not host_move.clear(1.3 * 1.12, spread, move, 0.10, 0.05).not_slower
    assert host_move.clear(float("nan"), spread, move, 0.10, 0.05) is None
    assert host_move.measure(readings[:2]) is None
    # A reading with no variance is left out, not the whole move.
    assert host_move.measure([*readings, host_move.Reading("z", 0.0, 0.0, 0.0, 0.0)]).df == 3
    assert host_move.reading("x", 1.3, [0.0, 0.01], spread) is None  # too few pairs


def test_the_confirmation_line_says_what_the_move_cleared():
    _, result = _confirmed(host=1.3, code={})
    text = render_text(result)
    assert "the machine moved x1.3" in text
    assert "stored over paired ratios of 6 benchmarks" in text
    assert "over it, 6 of the 6 candidates no pair decided are not slower" in text
    assert "its budget did not reach are not confirmed" not in text


def test_a_move_with_nothing_left_to_judge_is_not_mentioned():
    _, result = _confirmed(host=1.3, code={}, reach=12)
    assert result.confirmation.host_move.judged == {}
    assert "the machine moved" not in render_text(result)


def test_a_move_read_from_ratios_the_control_was_divided_out_of_says_so():
    _, result = _confirmed(host=1.3, code={})
    assert not result.confirmation.host_move.beyond_control
    move = dataclasses.replace(result.confirmation.host_move, beyond_control=True)
    saved = Confirmation.from_json(dataclasses.replace(result.confirmation,
                                                       host_move=move).to_json())
    assert saved.host_move.beyond_control
    text = render_text(dataclasses.replace(result, confirmation=saved))
    assert "beyond the control's share between the runs (stored over paired ratios" in text
