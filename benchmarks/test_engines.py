"""The engine configurations side by side on the same work: our prefill/decode loop and
transformers' `generate`, each eager on a dynamic KV cache, eager on a static one, and with
its static-cache decode steps compiled (`llmbench.engine.compiled`); and the loop with
transformers' eager attention in place of SDPA.

Every configuration must produce the eager loop's greedy tokens on a dynamic cache, token
for token, before its time counts: in float32 a cache changes where keys and values live,
not what is computed from them, and neither fused kernels (compiled, or SDPA's) nor the
attention path may change a greedy choice. A compiled case compiles its shapes in an
untimed call first (its `extra_info["compile"]`) and fails if anything compiles during its
rounds.
"""

import dataclasses
from typing import NamedTuple

import pytest

from fixtures.timing import Work
from llmbench.engine.attention import attention, attention_of
from llmbench.engine.batching import generate_static_batch
from llmbench.engine.compiled import check_compile_supported, compiled_decoder
from llmbench.engine.config import SamplingParams
from llmbench.engine.hf import hf_generate, hf_generate_batch
from llmbench.engine.loop import generate
from llmbench.errors import UserError

RUNNERS = {
    ("loop", False): lambda lm, prompts, params, kv: generate(lm, prompts[0], params,
                                                              kv_cache=kv),
    ("hf", False): lambda lm, prompts, params, kv: hf_generate(lm, prompts[0], params, kv),
    ("loop", True): lambda lm, prompts, params, kv: generate_static_batch(
        lm, prompts, params, kv_cache=kv),
    ("hf", True): hf_generate_batch,
}


class Configuration(NamedTuple):
    engine: str
    kv_cache: str = "dynamic"
    compiled: bool = False
    attn: str | None = None  # None: the session's (--attn, by default the model's choice)


# The eager dynamic-cache cases on the session's attention keep their bare engine names, so
# their history runs on unbroken from before the others were measured.
CONFIGURATIONS = {
    "loop": Configuration("loop"),
    "loop-eager-attn": Configuration("loop", attn="eager"),
    "loop-static": Configuration("loop", "static"),
    "loop-static-compiled": Configuration("loop", "static", compiled=True),
    "hf": Configuration("hf"),
    "hf-static": Configuration("hf", "static"),
    "hf-static-compiled": Configuration("hf", "static", compiled=True),
}


@pytest.fixture(scope="module")
def engine_models(model):
    """`engine_models(compiled)`: the session's model, eager or with a compiled decoder
    (the same weights; made once, whatever the session's own --compile says)."""
    eager = dataclasses.replace(model, compiled_decoder=None)
    made = {}

    def get(compiled: bool):
        if not compiled:
            return eager
        if True not in made:
            try:
                check_compile_supported(model.device)
            except UserError as exc:
                pytest.skip(str(exc))
            made[True] = dataclasses.replace(
                model, compiled_decoder=model.compiled_decoder
                or compiled_decoder(model.model, model.device))
        return made[True]

    return get


@pytest.fixture(scope="module")
def engine_work(engine_models, prompt_batch, bench_settings):
    """`engine_work(batch)`: (prompts, params, the loop's greedy tokens), computed once per
    batch size and shared by both engines' cases."""
    profile = bench_settings.profile
    params = SamplingParams(max_new_tokens=profile.engine_new_tokens, ignore_eos=True)
    cases = {}

    def get(batch: int):
        if batch not in cases:
            prompts = prompt_batch(batch, profile.engine_prompt_tokens)
            reference = [r.token_ids for r in generate_static_batch(
                engine_models(False), prompts, params, kv_cache="dynamic")]
            cases[batch] = (prompts, params, reference)
        return cases[batch]

    return get


@pytest.mark.benchmark(group="engines")
@pytest.mark.parametrize("configuration", list(CONFIGURATIONS))
def test_engine(measure, engine_models, engine_work, configuration, engine_batch):
    prompts, params, reference = engine_work(engine_batch)
    config = CONFIGURATIONS[configuration]
    lm = engine_models(config.compiled)
    is_batch = engine_batch > 1
    run = RUNNERS[(config.engine, is_batch)]

    def same_tokens(output):
        results = output if is_batch else [output]
        assert [r.token_ids for r in results] == reference, (
            f"{configuration} disagrees with the eager loop on a dynamic cache")

    with attention(lm.model, config.attn or attention_of(lm.model)):
        measure(lambda: run(lm, prompts, params, config.kv_cache), check=same_tokens,
                expect=Work(sum(map(len, prompts)), engine_batch * params.max_new_tokens),
                compiled=config.compiled, engine=config.engine, kv_cache=config.kv_cache,
                compiled_decode=config.compiled, attn=attention_of(lm.model),
                batch_size=engine_batch)
