"""The engine configurations side by side on the same work: our prefill/decode loop and
transformers' `generate`, each eager on a dynamic KV cache, eager on a static one, and with
its static-cache decode steps compiled (`llmbench.engine.compiled`); the loop with
transformers' eager attention in place of SDPA; the loop on linear weights prepacked for
oneDNN (`llmbench.engine.packed`), in the session's precision and in bfloat16; and the loop
in bfloat16, with native, int8 and int4 weights (`llmbench.engine.quantized`). Each
configuration with other weights or precision than the session's runs on its own copy of
the model.

What each configuration is held to before its time counts:
- In the session's precision and weights, or the same weights prepacked, the eager loop's
  greedy tokens on a dynamic cache, token for token: a cache changes where keys and values
  live, not what is computed from them, and neither fused kernels (compiled, SDPA's or
  oneDNN's) nor the attention path may change a greedy choice in float32.
- In another precision or with quantized weights (bfloat16 only where the device multiplies
  it natively: an A100, a CPU with AVX512-BF16 or AMX), the numbers differ, so the greedy tokens
  may part from the reference after a while: such a case is held to giving the same tokens
  in every round (a recompiled or corrupted path shows as a change), and how far it agrees
  with the reference is recorded in its `extra_info["agreement"]` (`llmbench agreement`
  measures that over more prompts).

A compiled case compiles its shapes in an untimed call first (its `extra_info["compile"]`)
and fails if anything compiles during its rounds.
"""

import dataclasses
from typing import NamedTuple

import pytest

from fixtures.timing import Work
from llmbench.bench.settings import SETTINGS_KEY
from llmbench.engine.agreement import token_agreement
from llmbench.engine.attention import attention, attention_of
from llmbench.engine.batching import generate_static_batch
from llmbench.engine.compiled import check_compile_supported, compiled_decoder
from llmbench.engine.config import SamplingParams
from llmbench.engine.device import has_native_bfloat16
from llmbench.engine.hf import hf_generate, hf_generate_batch
from llmbench.engine.loop import generate
from llmbench.engine.models import load_model
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
    dtype: str | None = None  # None: the session's model; else a copy loaded in this dtype
    weights: str | None = None  # None: the session's --weights

    @property
    def same_numbers(self) -> bool:
        """Whether it computes with the session model's weights and precision."""
        return self.dtype is None and self.weights is None

    def held_to_reference(self, session_weights: str) -> bool:
        """Whether its greedy tokens must be the session model's: it computes with the same
        weight values in the same precision, packed or not."""
        return self.same_numbers or (self.dtype is None and self.weights == "packed"
                                     and session_weights in ("native", "packed"))


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
    "loop-packed": Configuration("loop", weights="packed"),
    "loop-bf16-packed": Configuration("loop", dtype="bfloat16", weights="packed"),
    "loop-bf16-static-compiled": Configuration("loop", "static", compiled=True,
                                               dtype="bfloat16", weights="native"),
    "loop-bf16-int8-static-compiled": Configuration("loop", "static", compiled=True,
                                                    dtype="bfloat16", weights="int8"),
    "loop-bf16-int4": Configuration("loop", dtype="bfloat16", weights="int4"),
    "loop-bf16-int4-static-compiled": Configuration("loop", "static", compiled=True,
                                                    dtype="bfloat16", weights="int4"),
}


@pytest.fixture(scope="module")
def engine_models(model, bench_settings):
    """`engine_models(configuration)`: the model it runs, eager or with a compiled decoder.
    The session's model serves every configuration of its precision and weights; another
    precision or weights is a copy loaded once for the module (skipped, with the reason,
    where the device cannot run it)."""
    loaded = {(None, None): dataclasses.replace(model, compiled_decoder=None)}
    compiled = {}

    def weights_of(config: Configuration):
        if config.same_numbers:
            return None, None
        return config.dtype or bench_settings.engine.dtype, \
            config.weights or bench_settings.engine.weights

    def get(config: Configuration):
        key = weights_of(config)
        if key[0] == "bfloat16" and not has_native_bfloat16(model.device):
            pytest.skip(f"{model.device.type} has no native bfloat16 matmul (AVX512-BF16 or "
                        "AMX on a CPU): emulated, a bfloat16 prefill is several times slower "
                        "than float32's; run the suite with --dtype bfloat16 to measure it")
        if key not in loaded:
            dtype, weights = key
            engine = dataclasses.replace(bench_settings.engine, dtype=dtype, weights=weights,
                                         kv_cache="dynamic", compile=False)
            try:
                loaded[key] = load_model(engine)
            except UserError as exc:
                loaded[key] = str(exc)
        if isinstance(loaded[key], str):
            pytest.skip(loaded[key])
        if not config.compiled:
            return loaded[key]
        if key not in compiled:
            try:
                check_compile_supported(model.device)
            except UserError as exc:
                pytest.skip(str(exc))
            lm = loaded[key]
            reuse = model.compiled_decoder if key == (None, None) else None
            compiled[key] = dataclasses.replace(
                lm, compiled_decoder=reuse or compiled_decoder(lm.model, lm.device))
        return compiled[key]

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
                engine_models(CONFIGURATIONS["loop"]), prompts, params, kv_cache="dynamic")]
            cases[batch] = (prompts, params, reference)
        return cases[batch]

    return get


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The configurations the active profile runs (all of them unless it names some)."""
    if "configuration" in metafunc.fixturenames:
        chosen = metafunc.config.stash[SETTINGS_KEY].profile.engine_configurations
        unknown = sorted(set(chosen or ()) - set(CONFIGURATIONS))
        assert not unknown, f"the profile names unknown engine configurations: {unknown}"
        metafunc.parametrize("configuration", list(chosen or CONFIGURATIONS))


@pytest.mark.benchmark(group="engines")
def test_engine(measure, engine_models, engine_work, bench_settings, configuration,
                engine_batch):
    prompts, params, reference = engine_work(engine_batch)
    config = CONFIGURATIONS[configuration]
    lm = engine_models(config)
    is_batch = engine_batch > 1
    run = RUNNERS[(config.engine, is_batch)]
    first_round = []
    held_to_reference = config.held_to_reference(bench_settings.engine.weights)

    def same_tokens(output):
        tokens = [r.token_ids for r in (output if is_batch else [output])]
        if held_to_reference:
            assert tokens == reference, (
                f"{configuration} disagrees with the eager loop on a dynamic cache")
            return
        first_round[:] = first_round or [tokens]
        assert tokens == first_round[0], (
            f"{configuration} gave other greedy tokens than in its first round")

    def agreement(_rounds) -> dict:
        return {} if held_to_reference else {
            "agreement": token_agreement(reference, first_round[0]).to_json()}

    with attention(lm.model, config.attn or attention_of(lm.model)):
        measure(lambda: run(lm, prompts, params, config.kv_cache), check=same_tokens,
                expect=Work(sum(map(len, prompts)), engine_batch * params.max_new_tokens),
                summarize=agreement, compiled=config.compiled, engine=config.engine,
                kv_cache=config.kv_cache, compiled_decode=config.compiled,
                attn=attention_of(lm.model), batch_size=engine_batch,
                weights=config.weights or bench_settings.engine.weights,
                **({} if config.same_numbers else {"model_copy": {
                    "dtype": str(lm.dtype).removeprefix("torch."),
                    "weights": config.weights or bench_settings.engine.weights}}))
