"""Static batching: total throughput against batch size, and the same prompts served one
after another against all at once."""

import pytest

from fixtures.timing import Work
from llmbench.engine.batching import generate_static_batch
from llmbench.engine.config import SamplingParams
from llmbench.engine.loop import generate


@pytest.mark.benchmark(group="batch-size")
def test_batch_size(measure, model, prompt_batch, bench_settings, batch_size):
    profile = bench_settings.profile
    prompts = prompt_batch(batch_size, profile.batch_prompt_tokens)
    params = SamplingParams(max_new_tokens=profile.batch_new_tokens, ignore_eos=True)
    measure(lambda: generate_static_batch(model, prompts, params),
            expect=Work(batch_size * profile.batch_prompt_tokens,
                        batch_size * profile.batch_new_tokens), batch_size=batch_size)


@pytest.mark.benchmark(group="sequential-vs-batched")
@pytest.mark.parametrize("mode", ["sequential", "batched"])
def test_sequential_vs_batched(measure, model, prompt_batch, bench_settings, mode):
    profile = bench_settings.profile
    size = profile.sequential_batch
    prompts = prompt_batch(size, profile.batch_prompt_tokens)
    params = SamplingParams(max_new_tokens=profile.batch_new_tokens, ignore_eos=True)
    if mode == "batched":
        def run():
            return generate_static_batch(model, prompts, params)
    else:
        def run():
            return [generate(model, prompt, params) for prompt in prompts]
    measure(run, expect=Work(size * profile.batch_prompt_tokens,
                             size * profile.batch_new_tokens), batch_size=size)
