"""Our prefill/decode loop against transformers' `generate`, on the same work. Both must
produce the loop's greedy tokens before their times count."""

import pytest

from fixtures.timing import Work
from llmbench.engine.batching import generate_static_batch
from llmbench.engine.config import SamplingParams
from llmbench.engine.hf import hf_generate, hf_generate_batch
from llmbench.engine.loop import generate

RUNNERS = {
    ("loop", False): lambda lm, prompts, params: generate(lm, prompts[0], params),
    ("hf", False): lambda lm, prompts, params: hf_generate(lm, prompts[0], params),
    ("loop", True): generate_static_batch,
    ("hf", True): hf_generate_batch,
}


@pytest.fixture(scope="module")
def engine_work(model, prompt_batch, bench_settings):
    """`engine_work(batch)`: (prompts, params, the loop's greedy tokens), computed once per
    batch size and shared by both engines' cases."""
    profile = bench_settings.profile
    params = SamplingParams(max_new_tokens=profile.engine_new_tokens, ignore_eos=True)
    cases = {}

    def get(batch: int):
        if batch not in cases:
            prompts = prompt_batch(batch, profile.engine_prompt_tokens)
            reference = [r.token_ids for r in generate_static_batch(model, prompts, params)]
            cases[batch] = (prompts, params, reference)
        return cases[batch]

    return get


@pytest.mark.benchmark(group="engines")
@pytest.mark.parametrize("engine", ["loop", "hf"])
def test_engine(measure, model, engine_work, engine, engine_batch):
    prompts, params, reference = engine_work(engine_batch)
    is_batch = engine_batch > 1
    run = RUNNERS[(engine, is_batch)]

    def same_tokens(output):
        results = output if is_batch else [output]
        assert [r.token_ids for r in results] == reference, f"{engine} disagrees with loop"

    measure(lambda: run(model, prompts, params), check=same_tokens,
            expect=Work(sum(map(len, prompts)), engine_batch * params.max_new_tokens),
            engine=engine, batch_size=engine_batch)
