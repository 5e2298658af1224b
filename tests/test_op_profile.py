"""The decode-step profile: prefill is subtracted (per step, every layer's projections are
called once per layer), the costliest ops come first, and `llmbench profile` prints them as
a table or JSON."""

from __future__ import annotations

import json

from llmbench.engine.op_profile import decode_profile
from llmbench.engine.prompts import exact_length_ids
from tests.test_cli import assert_user_error, run_main


def test_a_decode_step_calls_each_linear_layer_once(tiny_lm):
    prompt = exact_length_ids(tiny_lm.tokenizer, 16)
    result = decode_profile(tiny_lm, prompt, 5, "dynamic")
    ops = {op.name: op for op in result.ops}
    linears = sum(1 for m in tiny_lm.model.modules() if type(m).__name__ == "Linear")
    # Every linear layer is one aten::linear per step (bias-free layers: one mm each);
    # prefill's calls are subtracted, so the per-step count is exact.
    assert ops["aten::mm"].calls_per_step == linears
    assert [op.ms_per_step for op in result.ops] == sorted(
        (op.ms_per_step for op in result.ops), reverse=True)
    assert result.clock == "cpu"  # which clock ranks the ops; no duration is asserted


def test_profile_prints_the_top_ops_and_json(capsys):
    base = ["profile", "--model", "tiny", "--device", "cpu", "--new-tokens", "4",
            "--prompt-tokens", "16", "--top", "3"]
    code, out, err = run_main(base, capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("tiny on cpu (default engine, float32): decode ")
    assert lines[1].split() == ["op", "ms/step", "of", "ops", "calls/step"]
    assert lines[5].startswith("(the other ")
    assert len(lines) == 6 or lines[6].startswith("outside any op (Python, dispatch, ")
    code, out, err = run_main([*base, "--json"], capsys)
    record = json.loads(out)
    assert len(record["ops"]) == 3 and record["clock"] == "cpu"
    assert record["configuration"]["weights"] == "native"


def test_one_new_token_has_no_decode_step(capsys):
    code, out, err = run_main(["profile", "--model", "tiny", "--new-tokens", "1"], capsys)
    assert_user_error(code, err, "--new-tokens must be at least 2")
