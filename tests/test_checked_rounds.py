"""Every round is checked before its time counts: prefill's first token and the decode steps'
tokens against an untimed reference of the same case. A model that answers otherwise on one
round fails the case, and its timing is not saved."""

from __future__ import annotations

import json
import textwrap

import pytest
from gate_runs import run_pytest, suite_copy

# Moves the argmax of one call's logits (the benchmark's FLIP_AT_CALL-th call of
# FLIP_FUNCTION) to another token; every other call is the real one.
FLIP_PLUGIN = '''
import os


def pytest_collection_modifyitems(session, config, items):
    # Patched where the benchmark module looks the function up, after collection imported it:
    # the model's own warm-up calls stay real and uncounted.
    name, at, calls = os.environ["FLIP_FUNCTION"], int(os.environ["FLIP_AT_CALL"]), [0]
    module = items[0].module
    real = getattr(module, name)

    def flipped(*args, **kwargs):
        logits, cache = real(*args, **kwargs)
        calls[0] += 1
        if calls[0] == at:
            logits = logits.roll(1, dims=-1)
        return logits, cache

    setattr(module, name, flipped)
'''
ARGS = ["--benchmark-only", "--model", "tiny", "--threads", "1", "--rounds", "3",
        "--warmup-rounds", "1", "-p", "no:cacheprovider"]
CASES = {"decode_step": "benchmarks/test_prefill_decode.py::test_decode_steps[ctx=16]",
         "prefill": "benchmarks/test_prefill_decode.py::test_prefill[in=32]"}


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    root = tmp_path_factory.mktemp("checked")
    (root / "plugins").mkdir()
    (root / "plugins" / "flip_tokens.py").write_text(textwrap.dedent(FLIP_PLUGIN))
    return suite_copy(root / "suite"), root / "plugins"


@pytest.mark.parametrize("function, at_call", [("decode_step", 24), ("prefill", 3)])
def test_one_round_with_other_tokens_fails_its_case(suite, tmp_path, function, at_call):
    """One timed round flipped. decode_step: the reference takes the profile's steps (calls
    1-10), the warm-up round the next ten, so call 24 falls inside the first timed round;
    prefill: call 3 is the first timed round (the reference is call 1, the warm-up call 2)."""
    copy, plugins = suite
    proc = run_pytest(copy, *ARGS, f"--baseline-dir={tmp_path}", "-p", "flip_tokens",
                      CASES[function], PYTHONPATH=str(plugins), FLIP_FUNCTION=function,
                      FLIP_AT_CALL=str(at_call))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "the untimed reference" in out
    saved = [json.loads(p.read_text()) for p in tmp_path.glob("*/*.json")]
    assert all(not run["benchmarks"] for run in saved), "a failed case's timing was saved"


@pytest.mark.parametrize("function", ["decode_step", "prefill"])
def test_the_unflipped_case_passes(suite, tmp_path, function):
    copy, plugins = suite
    proc = run_pytest(copy, *ARGS, f"--baseline-dir={tmp_path}", "-p", "flip_tokens",
                      CASES[function], PYTHONPATH=str(plugins), FLIP_FUNCTION=function,
                      FLIP_AT_CALL="0")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


@pytest.mark.parametrize("at_call", [6, 7])
def test_the_untimed_rounds_are_checked_too(suite, tmp_path, at_call):
    """In one pass, prefill's calls are: the reference (1), the warm-up (2), the timed rounds
    (3-5), the untimed round whose peak memory is the case's (6), the counted round (7):
    other tokens in either untimed round fail the case like a timed round's."""
    copy, plugins = suite
    proc = run_pytest(copy, *ARGS, "--passes", "1", f"--baseline-dir={tmp_path}", "-p",
                      "flip_tokens", CASES["prefill"], PYTHONPATH=str(plugins),
                      FLIP_FUNCTION="prefill", FLIP_AT_CALL=str(at_call))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "the untimed reference" in out
