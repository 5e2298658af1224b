"""Serving on a static cache (`llmbench serve --cache static [--compile]`): the slots' limits,
compiled steps that never compile while serving, the HTTP server's account of what it
serves, and the command line's refusals. Outputs equal to each request served alone are
checked for every kind of batch in test_scheduler."""

import dataclasses

import pytest
from fastapi.testclient import TestClient

from llmbench.cli import main
from llmbench.engine.compiled import NOTHING_COMPILED, compile_counts
from llmbench.engine.config import EngineConfig, SamplingParams
from llmbench.engine.loop import TokenEvent, generate
from llmbench.engine.models import load_model
from llmbench.engine.prompts import encode
from llmbench.errors import Exit, UserError
from llmbench.serve.app import ServerSettings, create_app
from llmbench.serve.scheduler import Scheduler
from llmbench.serve.slot_batch import buckets

pytestmark = pytest.mark.xdist_group("inductor-compile")


@pytest.fixture(scope="module")
def eager():
    return load_model(EngineConfig(model="tiny", device="cpu"))


@pytest.fixture(scope="module")
def static():
    return load_model(EngineConfig(model="tiny", device="cpu", kv_cache="static"))


@pytest.mark.parametrize("largest, expected", [(1, (1,)), (2, (1, 2)), (5, (1, 2, 4, 5)),
                                                (16, (1, 2, 4, 8, 16))])
def test_compiled_steps_run_at_powers_of_two_up_to_the_largest_batch(largest, expected):
    assert buckets(largest) == expected


def test_a_request_longer_than_a_slot_is_refused_naming_the_flag(static):
    scheduler = Scheduler(static, max_batch_size=2, max_waiting=4, max_context=32)
    try:
        scheduler.submit([1] * 20, SamplingParams(max_new_tokens=13))  # 32 positions: fits
        with pytest.raises(UserError, match=r"static cache of 32 tokens .* --max-context"):
            scheduler.submit([1] * 20, SamplingParams(max_new_tokens=14))
    finally:
        scheduler.close()


def test_compiled_serving_compiles_every_batch_size_before_the_first_request(eager):
    compiled = load_model(EngineConfig(model="tiny", device="cpu", kv_cache="static",
                                       compile=True))
    scheduler = Scheduler(compiled, max_batch_size=5, max_waiting=8, max_context=96)
    try:
        before = compile_counts() or NOTHING_COMPILED
        scheduler.start()
        warmed = compile_counts()
        assert (warmed - before).graphs == len(buckets(5))  # one graph per batch size
        prompts = [encode(eager.tokenizer, f"Question {i}: {'why ' * i}?", chat=True)
                   for i in range(7)]
        # Different lengths: the batch shrinks 5, 4, 3 (the bucket of 4 with a spare row), ...
        params = [SamplingParams(max_new_tokens=4 + 3 * i, ignore_eos=True) for i in range(7)]
        with scheduler._cond:
            requests = [scheduler.submit(p, sp) for p, sp in zip(prompts, params, strict=True)]
        for request, prompt, sp in zip(requests, prompts, params, strict=True):
            tokens = [i.token_id for i in request if isinstance(i, TokenEvent)]
            assert tuple(tokens) == generate(eager, prompt, sp).token_ids
        assert scheduler.stats.peak_batch_size == 5
        assert compile_counts() - warmed == NOTHING_COMPILED  # no request waited on a compile
    finally:
        scheduler.close()


def test_a_static_server_says_what_it_serves_and_answers_as_the_engine(static, eager):
    with TestClient(create_app(static, ServerSettings(max_context=128))) as client:
        health = client.get("/health").json()
        assert (health["kv_cache"], health["compiled"]) == ("static", False)
        body = client.post("/generate", json={"prompt": "What is 2+2?", "max_new_tokens": 6,
                                              "ignore_eos": True}).json()
        expected = generate(eager, encode(eager.tokenizer, "What is 2+2?", chat=True),
                            SamplingParams(max_new_tokens=6, ignore_eos=True))
        assert tuple(body["token_ids"]) == expected.token_ids
        too_long = client.post("/generate", json={"prompt": "hi " * 200,
                                                  "max_new_tokens": 6})
        assert too_long.status_code == 422 and "--max-context" in too_long.text


@pytest.mark.parametrize("kv_cache", ["dynamic", "static"])
def test_a_sliding_window_model_is_refused_at_startup(eager, kv_cache):
    from transformers import MistralConfig, MistralForCausalLM

    config = MistralConfig(vocab_size=len(eager.tokenizer), hidden_size=32,
                           intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           num_key_value_heads=1, sliding_window=4)
    lm = dataclasses.replace(eager, model=MistralForCausalLM(config).eval(), kv_cache=kv_cache)
    scheduler = Scheduler(lm, max_batch_size=2, max_waiting=2, max_context=64)
    with pytest.raises(UserError, match="plain DynamicCache"):
        scheduler.start()


@pytest.mark.parametrize("max_context", [1, 8193])
def test_a_slot_must_hold_two_positions_and_fit_the_models_context(static, max_context):
    with pytest.raises(UserError, match="--max-context must be between 2 and tiny's "
                                        "context of 8192 tokens"):
        Scheduler(static, max_batch_size=1, max_waiting=1, max_context=max_context)


def test_serve_offers_every_engine_option(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = capsys.readouterr().out
    flags = {"model": "--model", "device": "--device", "dtype": "--dtype",
             "threads": "--threads", "kv_cache": "--cache", "compile": "--compile",
             "attn": "--attn", "weights": "--weights"}
    assert set(flags) == set(EngineConfig.__dataclass_fields__)
    for flag in flags.values():
        assert f"[{flag}" in text, flag
    assert "--max-context" in text


@pytest.mark.parametrize("argv, message", [
    (["--max-context", "64"], "--max-context sizes the slots of a static cache: add --cache "
                              "static"),
    (["--compile"], "--compile needs --cache static"),
    (["--cache", "static", "--compile", "--weights", "packed"], "--weights packed runs eager"),
])
def test_serve_refuses_what_it_cannot_serve_in_one_line(argv, message, capsys):
    assert main(["serve", "--model", "tiny", "--port", "0", *argv]) == Exit.USAGE
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err
