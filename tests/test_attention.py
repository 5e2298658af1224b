"""The attention switch: eager attention gives SDPA's greedy tokens, the switch is undone
after its block (also on error), the loaded model runs what --attn asked for, and an
implementation a model cannot run is one user error."""

from __future__ import annotations

import pytest

from llmbench.engine.attention import attention, attention_of, set_attention
from llmbench.engine.config import EngineConfig, SamplingParams
from llmbench.engine.loop import generate
from llmbench.engine.models import load_model
from llmbench.engine.prompts import encode
from llmbench.errors import UserError


def test_eager_attention_gives_the_sdpa_tokens(any_lm):
    prompt = encode(any_lm.tokenizer, "Why do leaves fall?", chat=True)
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    assert attention_of(any_lm.model) == "sdpa"
    sdpa = generate(any_lm, prompt, params).token_ids
    with attention(any_lm.model, "eager"):
        assert attention_of(any_lm.model) == "eager"
        eager = generate(any_lm, prompt, params).token_ids
    assert attention_of(any_lm.model) == "sdpa"
    assert eager == sdpa


def test_the_switch_is_undone_when_its_block_fails(tiny_lm):
    with pytest.raises(RuntimeError, match="boom"), attention(tiny_lm.model, "eager"):
        raise RuntimeError("boom")
    assert attention_of(tiny_lm.model) == "sdpa"


def test_a_model_loads_with_the_attention_asked_for_or_its_own():
    lm = load_model(EngineConfig(model="tiny", device="cpu", attn="eager"))
    assert attention_of(lm.model) == "eager"
    assert EngineConfig(attn="eager").variant == "eager-attn"
    assert EngineConfig().attn == "auto" and EngineConfig().variant == ""


def test_an_implementation_the_model_cannot_run_is_a_user_error(tiny_lm):
    with pytest.raises(UserError, match="cannot run --attn no_such_kernel"):
        set_attention(tiny_lm.model, "no_such_kernel")
    assert attention_of(tiny_lm.model) == "sdpa"
    with pytest.raises(UserError,
                       match="unknown attention 'flash': choose one of auto, sdpa, eager"):
        EngineConfig(attn="flash")
