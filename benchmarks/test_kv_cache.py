"""The KV cache on and off: the same prompt and token count both ways, and both must
produce the same tokens before their times count."""

import pytest

from fixtures.timing import Work
from llmbench.engine.config import SamplingParams
from llmbench.engine.loop import generate


@pytest.fixture(scope="module")
def kv_case(model, prompt_ids, bench_settings):
    profile = bench_settings.profile
    prompt = prompt_ids(profile.kv_prompt_tokens)
    params = SamplingParams(max_new_tokens=profile.kv_new_tokens, ignore_eos=True)
    reference = generate(model, prompt, params).token_ids
    return prompt, params, reference


@pytest.mark.benchmark(group="kv-cache")
@pytest.mark.parametrize("use_cache", [True, False], ids=["cache=on", "cache=off"])
def test_kv_cache(measure, model, kv_case, use_cache):
    prompt, params, reference = kv_case

    def same_tokens(result):
        assert result.token_ids == reference, "cache on and off disagree"

    measure(lambda: generate(model, prompt, params, use_cache=use_cache),
            expect=Work(len(prompt), params.max_new_tokens), check=same_tokens)
