"""Our prefill/decode loop against transformers' `generate`, on the same work. Both must
produce the loop's greedy tokens before their times count."""

import pytest

from fixtures.timing import Work
from llmbench.batching import generate_static_batch
from llmbench.config import SamplingParams
from llmbench.engine import generate
from llmbench.hf import hf_generate, hf_generate_batch
from llmbench.profiles import SWEEP_OUTPUT_TOKENS, SWEEP_PROMPT_TOKENS

RUNNERS = {
    ("loop", False): lambda lm, prompts, params: generate(lm, prompts[0], params),
    ("hf", False): lambda lm, prompts, params: hf_generate(lm, prompts[0], params),
    ("loop", True): generate_static_batch,
    ("hf", True): hf_generate_batch,
}


@pytest.mark.benchmark(group="engines")
@pytest.mark.parametrize("engine", ["loop", "hf"])
def test_engine(measure, model, prompt_ids, engine, engine_batch):
    prompts = [prompt_ids(SWEEP_PROMPT_TOKENS, offset=i * 37) for i in range(engine_batch)]
    params = SamplingParams(max_new_tokens=SWEEP_OUTPUT_TOKENS, ignore_eos=True)
    is_batch = engine_batch > 1
    run = RUNNERS[(engine, is_batch)]
    reference = [r.token_ids for r in generate_static_batch(model, prompts, params)]

    def same_tokens(output):
        results = output if is_batch else [output]
        assert [r.token_ids for r in results] == reference, f"{engine} disagrees with loop"

    measure(lambda: run(model, prompts, params), check=same_tokens,
            expect=Work(engine_batch * SWEEP_PROMPT_TOKENS, engine_batch * SWEEP_OUTPUT_TOKENS),
            engine=engine, batch_size=engine_batch)
