"""Rounds in passes (`llmbench.bench.interleave`): each case's rounds split into shares, one
share of every case a pass, each case finished after the last pass; a case that fails later
is kept out of the saved run and fails the session; the real suite takes its rounds so."""

from __future__ import annotations

import json

import pytest
from gate_runs import REPO, run_pytest

from llmbench.bench.interleave import Interleaver, shares


@pytest.mark.parametrize("rounds, passes, expected", [
    (10, 10, (1,) * 10), (15, 10, (2,) * 5 + (1,) * 5), (3, 10, (1, 1, 1)),
    (10, 1, (10,)), (10, 3, (4, 3, 3)), (1, 5, (1,))])
def test_shares_split_the_rounds_over_the_passes(rounds, passes, expected):
    assert shares(rounds, passes) == expected
    assert sum(shares(rounds, passes)) == rounds


class FakeCase:
    def __init__(self, name: str, rounds: int, passes: int, calls: list, fail_at: int = 0):
        self.name, self.calls, self.fail_at = name, calls, fail_at
        self.shares = shares(rounds, passes)
        self.taken, self.abandoned, self.finished = self.shares[0], False, False

    def more(self, rounds: int) -> None:
        self.calls.append((self.name, rounds))
        self.taken += rounds
        if self.fail_at and self.taken >= self.fail_at:
            raise AssertionError(f"round {self.taken} made other tokens")

    def finish(self) -> None:
        self.calls.append((self.name, "finish"))
        self.finished = True

    def abandon(self) -> None:
        self.abandoned = True


def test_the_passes_take_one_share_of_every_case_in_turn_then_finish_each():
    calls: list = []
    controls: list = []
    interleaver = Interleaver(3, after_round=lambda: controls.append(len(calls)))
    a, b = FakeCase("a", 6, 3, calls), FakeCase("b", 3, 3, calls)
    interleaver.add(a)
    interleaver.add(b)
    interleaver.run()
    assert calls == [("a", 2), ("b", 1), ("a", 2), ("b", 1), ("a", "finish"), ("b", "finish")]
    assert controls == [1, 2, 3, 4]  # after each case's share
    assert a.taken == 6 and b.taken == 3 and a.finished and b.finished
    assert not interleaver.cases and not interleaver.failures


def test_a_case_that_fails_in_a_later_pass_is_abandoned_and_named_the_rest_go_on():
    calls: list = []
    interleaver = Interleaver(4)
    bad, good = FakeCase("bad", 4, 4, calls, fail_at=3), FakeCase("good", 4, 4, calls)
    interleaver.add(bad)
    interleaver.add(good)
    interleaver.run()
    assert bad.abandoned and not bad.finished
    assert good.finished and not good.abandoned
    assert calls.count(("bad", 1)) == 2  # its third round failed; no fourth
    assert calls.count(("good", 1)) == 3
    assert interleaver.failures == ["bad: AssertionError: round 3 made other tokens"]


def test_cases_the_session_never_passed_over_are_abandoned():
    interleaver = Interleaver(5)
    case = FakeCase("stopped", 5, 5, [])
    interleaver.add(case)
    assert interleaver.abandon_unfinished() == ["stopped"]
    assert case.abandoned and not interleaver.cases


def test_one_pass_is_the_rounds_one_after_another():
    assert not Interleaver(1).active and Interleaver(2).active


FLIP_LATER = '''
import os


def pytest_collection_modifyitems(session, config, items):
    # Flips the argmax of the AT-th prefill of 32 tokens (the prefill case's; the decode
    # case prefills 16 in its setup): with one round a pass, a call of a later pass, after
    # pytest has already reported the case.
    at, calls = int(os.environ["FLIP_AT_CALL"]), [0]
    module = items[0].module
    real = module.prefill

    def flipped(model, input_ids, *args, **kwargs):
        logits, cache = real(model, input_ids, *args, **kwargs)
        calls[0] += input_ids.shape[-1] == 32
        if input_ids.shape[-1] == 32 and calls[0] == at:
            logits = logits.roll(1, dims=-1)
        return logits, cache

    module.prefill = flipped
'''
ARGS = ["--benchmark-only", "--model", "tiny", "--threads", "1", "--warmup-rounds", "0",
        "-p", "no:cacheprovider"]
PREFILL = "benchmarks/test_prefill_decode.py::test_prefill"
DECODE = "benchmarks/test_prefill_decode.py::test_decode_steps"


def test_the_suite_takes_its_rounds_in_passes_and_records_them(tmp_path):
    """Five rounds in five passes over five cases: every case has its five rounds, each
    checked; the control workload ran after each case's share; the run says how it was
    measured."""
    proc = run_pytest(REPO, *ARGS, "--rounds=5", "--passes=5", f"--baseline-dir={tmp_path}",
                      PREFILL, DECODE)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "llmbench: passes 2-5 of 5 over 5 case(s)" in out
    (path,) = tmp_path.glob("*/*.json")
    run = json.loads(path.read_text())
    assert run["llmbench"]["environment"]["passes"] == 5
    assert len(run["benchmarks"]) == 5
    for bench in run["benchmarks"]:
        assert len(bench["stats"]["data"]) >= 5, bench["name"]
        assert bench["extra_info"]["disturbed_rounds"] is not None
    assert len(run["llmbench"]["control_s"]) == 5 * 5


def test_a_round_of_a_later_pass_with_other_tokens_fails_the_session_and_is_not_saved(
        tmp_path):
    """The prefill case's reference is call 1, its first round call 2, its memory round call
    3 and its counted round call 4, all in the item; call 5 is its round of pass 2, after
    pytest reported the case as passed."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "flip_later.py").write_text(FLIP_LATER)
    proc = run_pytest(REPO, *ARGS, "--rounds=4", "--passes=4",
                      f"--baseline-dir={tmp_path / 'runs'}", "-p", "flip_later",
                      f"{PREFILL}[in=32]", f"{DECODE}[ctx=16]",
                      PYTHONPATH=str(tmp_path / "plugins"), FLIP_AT_CALL="5")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "a case's later rounds (taken in passes) failed" in out
    assert "test_prefill[in=32]: AssertionError" in out
    (path,) = (tmp_path / "runs").glob("*/*.json")
    saved = [b["name"] for b in json.loads(path.read_text())["benchmarks"]]
    assert saved == ["test_decode_steps[ctx=16]"]
