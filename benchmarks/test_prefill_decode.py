"""Prefill against decode: the per-token cost of processing the prompt in one pass, against
generating one token at a time, early in a sequence and late in it. Both run on the
session's KV cache kind (`--cache`); a static one is allocated for exactly what the case
stores. Each round's greedy tokens must be the ones an untimed call of the same case gave
before the rounds, or the case fails."""

import pytest
import torch

from fixtures.timing import Work
from llmbench.engine.loop import decode_step, prefill, request_cache


@pytest.mark.benchmark(group="prefill")
def test_prefill(measure, model, prompt_ids, prefill_tokens):
    """Prefill plus picking the first token: the time to first token."""
    input_ids = torch.tensor([prompt_ids(prefill_tokens)], device=model.device)

    @torch.inference_mode()
    def first_token():
        logits, _ = prefill(model, input_ids, cache=request_cache(model, prefill_tokens))
        return Work(prefill_tokens, 1, tokens=(logits.argmax(dim=-1),))

    result = measure(first_token, expect=Work(prefill_tokens, 1), reference_tokens=True)
    assert result.output_tokens == 1


@pytest.mark.benchmark(group="decode")
def test_decode_steps(measure, model, prompt_ids, bench_settings, decode_context):
    """`decode_steps` greedy steps on top of a cache already holding `decode_context`
    tokens; the prefill that builds the cache runs untimed in setup."""
    steps = bench_settings.profile.decode_steps
    input_ids = torch.tensor([prompt_ids(decode_context)], device=model.device)

    @torch.inference_mode()
    def prefilled():
        empty = request_cache(model, decode_context + steps)
        logits, cache = prefill(model, input_ids, cache=empty)
        return (logits.argmax(dim=-1, keepdim=True), cache), {}

    @torch.inference_mode()
    def decode(token, cache):
        produced = []
        for _ in range(steps):
            logits, cache = decode_step(model, token, cache)
            token = logits.argmax(dim=-1, keepdim=True)
            produced.append(token)
        return Work(decode_context, steps, tokens=tuple(produced))

    measure(decode, setup=prefilled, expect=Work(decode_context, steps), reference_tokens=True,
            first_step_context=decode_context + 1)
