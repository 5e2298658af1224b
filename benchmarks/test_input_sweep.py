"""Latency against prompt length at a fixed number of new tokens (the profile's: 16 quick,
32 full): exact-length token prompts, plus a chat-formatted real passage as a chat user
would send it."""

import pytest

from fixtures.timing import Work
from llmbench.engine.config import SamplingParams
from llmbench.engine.loop import generate
from llmbench.engine.prompts import chat_passage_ids


@pytest.mark.benchmark(group="input-sweep")
def test_input_sweep(measure, model, prompt_ids, input_case):
    num_input, num_output = input_case
    prompt = prompt_ids(num_input)
    params = SamplingParams(max_new_tokens=num_output, ignore_eos=True)
    measure(lambda: generate(model, prompt, params), expect=Work(num_input, num_output))


@pytest.mark.benchmark(group="input-sweep")
def test_input_chat_passage(measure, model, bench_settings):
    if not model.is_chat:
        pytest.skip(f"{model.name} has no chat template")
    prompt = chat_passage_ids(model.tokenizer, bench_settings.profile.chat_passage_tokens)
    num_output = bench_settings.profile.input_sweep_new_tokens
    params = SamplingParams(max_new_tokens=num_output, ignore_eos=True)
    measure(lambda: generate(model, prompt, params), expect=Work(len(prompt), num_output),
            chat=True)
