"""Greedy-token agreement: prefixes are counted up to the first difference, a configuration
computing the reference's numbers agrees over every prompt, and `llmbench agreement` says so
per prompt and as JSON."""

from __future__ import annotations

import json

import pytest

from llmbench.engine.agreement import agreement_prompts, token_agreement
from tests.test_cli import assert_user_error, run_main


def test_agreement_counts_tokens_before_the_first_difference():
    result = token_agreement([[1, 2, 3, 4], [5, 6, 7, 8], [9, 9, 9, 9]],
                             [[1, 2, 3, 4], [5, 6, 0, 8], [0, 9, 9, 9]])
    assert result.prefixes == (4, 2, 0)
    assert result.identical == 1
    assert result.to_json() == {"prompts": 3, "tokens": 4, "identical": 1, "prefix_min": 0,
                                "prefix_median": 2, "prefixes": [4, 2, 0]}
    assert str(result) == ("1/3 prompts identical over 4 tokens; tokens before the first "
                           "difference: min 0, median 2")
    with pytest.raises(ValueError, match="same number of rows"):
        token_agreement([[1]], [[1], [2]])


def test_agreement_prompts_are_distinct_and_exactly_long(tiny_lm):
    prompts = agreement_prompts(tiny_lm.tokenizer, 10, 64)
    assert len(prompts) == 10 and {len(p) for p in prompts} == {64}
    assert len({tuple(p) for p in prompts}) == 10


def test_the_reference_configuration_agrees_with_itself_everywhere(capsys):
    # A static cache and eager attention compute float32's numbers: every prompt identical.
    code, out, err = run_main(["agreement", "--model", "tiny", "--device", "cpu", "--cache",
                               "static", "--attn", "eager", "--prompts", "3",
                               "--new-tokens", "8", "--json"], capsys)
    assert code == 0, err
    record = json.loads(out)
    assert record["configuration"]["kv_cache"] == "static"
    assert record["reference"]["kv_cache"] == "dynamic"
    assert (record["prompts"], record["tokens"], record["identical"]) == (3, 8, 3)
    assert record["prefixes"] == [8, 8, 8]


def test_agreement_of_bfloat16_int4_is_reported_per_prompt(capsys):
    code, out, err = run_main(["agreement", "--model", "tiny", "--device", "cpu", "--dtype",
                               "bfloat16", "--weights", "int4", "--prompts", "4",
                               "--new-tokens", "6"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == ("tiny: dtype bfloat16, weights int4, kv_cache dynamic, compile False, "
                        "attn auto")
    assert sum(line.startswith("  prompt ") for line in lines) == 4
    assert lines[-1].startswith("  ") and "prompts identical over 6 tokens" in lines[-1]


def test_agreement_refuses_what_the_device_cannot_run(capsys):
    code, out, err = run_main(["agreement", "--model", "tiny", "--device", "cpu", "--compile"],
                              capsys)
    assert_user_error(code, err, "--compile needs --cache static")
