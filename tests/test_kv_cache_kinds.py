"""The static KV cache against the dynamic one: the same greedy tokens from every engine
path, single and left-padded batches; what is preallocated and written; the option's
errors, and runs with a static cache kept apart from the default's."""

from __future__ import annotations

import dataclasses
import json

import pytest

from llmbench.engine import kv_cache, loop
from llmbench.engine.batching import generate_static_batch
from llmbench.engine.config import EngineConfig, SamplingParams
from llmbench.engine.hf import hf_generate, hf_generate_batch
from llmbench.engine.loop import generate
from llmbench.engine.prompts import encode, exact_length_ids
from llmbench.errors import UserError
from llmbench.runs import environment_differences, environment_key

N_NEW = 10


def prompt_of(lm) -> list[int]:
    return encode(lm.tokenizer, "Why is the sky blue?", chat=True)


def ragged_prompts(lm) -> list[list[int]]:
    """Prompts of different lengths: the batch is left-padded and masked."""
    return [exact_length_ids(lm.tokenizer, n)[-n:] for n in (4, 11, 19)]


def greedy(n: int = N_NEW) -> SamplingParams:
    return SamplingParams(max_new_tokens=n, ignore_eos=True)


def test_loop_on_a_static_cache_gives_the_dynamic_cache_tokens(any_lm):
    prompt = prompt_of(any_lm)
    dynamic = generate(any_lm, prompt, greedy(), kv_cache="dynamic")
    static = generate(any_lm, prompt, greedy(), kv_cache="static")
    assert static.token_ids == dynamic.token_ids
    assert static.output_tokens == N_NEW and static.finish_reason == "length"
    assert len(static.decode_times_s) == N_NEW - 1


def test_left_padded_batch_on_a_static_cache_gives_each_prompt_alone(any_lm):
    prompts = ragged_prompts(any_lm)
    alone = [generate(any_lm, p, greedy(), kv_cache="dynamic").token_ids for p in prompts]
    batch = generate_static_batch(any_lm, prompts, greedy(), kv_cache="static")
    assert [r.token_ids for r in batch] == alone


def test_generate_on_its_static_cache_agrees_with_the_loop(tiny_lm):
    prompt, prompts = prompt_of(tiny_lm), ragged_prompts(tiny_lm)
    reference = generate(tiny_lm, prompt, greedy(), kv_cache="dynamic").token_ids
    assert hf_generate(tiny_lm, prompt, greedy(), kv_cache="static").token_ids == reference
    alone = [generate(tiny_lm, p, greedy(), kv_cache="dynamic").token_ids for p in prompts]
    batch = hf_generate_batch(tiny_lm, prompts, greedy(), kv_cache="static")
    assert [r.token_ids for r in batch] == alone


def test_static_cache_holds_the_prompt_and_every_requested_token(tiny_lm, monkeypatch):
    made = []

    def recording(model, kind, max_len):
        cache = kv_cache.new_cache(model, kind, max_len)
        made.append((kind, max_len, cache))
        return cache

    monkeypatch.setattr(loop, "new_cache", recording)
    prompt = prompt_of(tiny_lm)
    generate(tiny_lm, prompt, greedy(), kv_cache="static")
    (kind, max_len, cache), = made
    # The last token is returned, never fed back: its position is never needed.
    assert (kind, max_len) == ("static", len(prompt) + N_NEW - 1)
    assert type(cache).__name__ == "StaticCache"
    assert int(cache.get_seq_length()) == max_len  # every position written, none spare
    assert cache.layers[0].keys.shape[2] == max_len


def test_the_model_default_cache_is_used_unless_a_call_asks_for_another(tiny_lm, monkeypatch):
    kinds = []
    real = kv_cache.new_cache
    monkeypatch.setattr(loop, "new_cache",
                        lambda model, kind, n: kinds.append(kind) or real(model, kind, n))
    static_lm = dataclasses.replace(tiny_lm, kv_cache="static")
    generate(static_lm, prompt_of(tiny_lm), greedy(3))
    generate(static_lm, prompt_of(tiny_lm), greedy(3), kv_cache="dynamic")
    generate(tiny_lm, prompt_of(tiny_lm), greedy(3))
    assert kinds == ["static", "dynamic", "dynamic"]


def test_generate_on_a_static_cache_never_compiles_by_itself(tiny_lm, monkeypatch):
    """Where transformers compiles static-cache decoding by itself (an accelerator), only
    `disable_compile` stops it: `static` must mean the cache and nothing more."""
    from transformers import CompileConfig
    from transformers.generation.utils import GenerationMixin

    real = GenerationMixin._valid_auto_compile_criteria
    verdicts = []

    def as_on_an_accelerator(self, model_kwargs, generation_config):
        config = CompileConfig()
        config._compile_all_devices = True
        generation_config.compile_config = config
        verdicts.append(real(self, model_kwargs, generation_config))
        return verdicts[-1]

    monkeypatch.setattr(GenerationMixin, "_valid_auto_compile_criteria", as_on_an_accelerator)
    result = hf_generate(tiny_lm, prompt_of(tiny_lm), greedy(3), kv_cache="static")
    assert result.output_tokens == 3
    assert verdicts and not any(verdicts)
    with pytest.raises(ValueError, match="unknown KV cache 'paged'"):
        kv_cache.hf_generate_kwargs("paged")


def test_generate_sizes_each_static_cache_for_its_own_request(tiny_lm):
    long_prompt = exact_length_ids(tiny_lm.tokenizer, 40)
    hf_generate(tiny_lm, long_prompt, greedy(), kv_cache="static")
    short = prompt_of(tiny_lm)
    hf_generate(tiny_lm, short, greedy(), kv_cache="static")
    # transformers keeps the longest length seen, unless told to forget it for each request;
    # sized for this one, it is the length our loop allocates
    assert tiny_lm.model._previous_max_cache_length == len(short) + N_NEW - 1


def test_unknown_cache_kind_is_a_user_error():
    with pytest.raises(UserError, match="unknown KV cache 'paged': choose one of dynamic, static"):
        EngineConfig(kv_cache="paged")


def test_static_cache_runs_are_saved_and_compared_apart():
    assert EngineConfig().variant == ""
    assert EngineConfig(kv_cache="static").variant == "static-cache"
    assert environment_key("tiny", "cpu", "float32") == "tiny-cpu-float32"
    assert (environment_key("tiny", "cpu", "float32", "static-cache")
            == "tiny-cpu-float32-static-cache")
    before = {"model": "tiny", "fingerprint": {"name": "tiny"}, "device": "cpu",
              "device_name": "x", "dtype": "float32", "threads": 2}  # saved before the field
    assert environment_differences(before, {**before, "kv_cache": "dynamic"}) == []
    assert environment_differences(before, {**before, "kv_cache": "static"}) == [
        "kv_cache 'dynamic' vs 'static'"]


def test_a_suite_run_on_a_static_cache_is_saved_in_its_own_folder(tmp_path):
    from gate_runs import SELECTION, TINY_ARGS, run_pytest, suite_copy

    suite = suite_copy(tmp_path / "suite")
    runs = tmp_path / "baselines"
    proc = run_pytest(suite, *TINY_ARGS, "--cache", "static", f"--baseline-dir={runs}",
                      SELECTION[1])
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (saved,) = runs.glob("*/*.json")
    assert saved.parent.name == "tiny-cpu-float32-static-cache"
    run = json.loads(saved.read_text())
    assert run["llmbench"]["environment"]["kv_cache"] == "static"
    bad = run_pytest(suite, *TINY_ARGS, "--cache", "paged", "--no-save", SELECTION[1])
    assert bad.returncode == pytest.ExitCode.USAGE_ERROR
    assert "'paged' is not one of: dynamic, static" in bad.stderr
