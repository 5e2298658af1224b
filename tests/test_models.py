"""The model registry and loaders: names, determinism, fingerprints, the GPT-2 path, and
the errors for names and paths that are not models."""

from __future__ import annotations

import json

import pytest
import torch

from llmbench.engine import gguf, models
from llmbench.engine.config import EngineConfig, SamplingParams
from llmbench.engine.hf import hf_generate
from llmbench.engine.loop import generate
from llmbench.engine.models import load_model, registered_names, shipped_configs
from llmbench.engine.prompts import exact_length_ids
from llmbench.errors import ModelNotFound


@pytest.fixture
def offline(monkeypatch):
    """No network: the hub counts as offline, and any socket connection fails the test."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def no_network(*args, **kwargs):
        raise AssertionError(f"tried to open a connection: {args}")

    monkeypatch.setattr(models.socket, "create_connection", no_network)


def test_registered_names():
    names = registered_names()
    assert names[:2] == ["smollm2-135m", "tiny"]
    for arch in ("smollm2-135m", "qwen3-0.6b", "distilgpt2"):
        assert f"{arch}@random" in names
    assert len(names) == len(set(names))
    assert {n.removesuffix("@random") for n in names[2:]} == set(shipped_configs())


def test_tiny_is_deterministic_and_leaves_the_global_rng_alone(tiny_lm):
    torch.manual_seed(123)
    expected_draw = torch.rand(3)
    torch.manual_seed(123)
    again = load_model(EngineConfig(model="tiny", device="cpu"))
    assert torch.equal(torch.rand(3), expected_draw)
    first, second = tiny_lm.model.state_dict(), again.model.state_dict()
    assert first.keys() == second.keys()
    for key in first:
        assert torch.equal(first[key], second[key]), key
    assert again.fingerprint == tiny_lm.fingerprint


def test_tiny_fingerprint_and_properties(tiny_lm):
    fp = tiny_lm.fingerprint
    assert set(fp) == {"name", "source", "architecture", "num_parameters", "dtype"}
    assert fp["name"] == "tiny"
    assert fp["architecture"] == "LlamaForCausalLM"
    assert fp["dtype"] == "float32"
    assert fp["num_parameters"] == sum(p.numel() for p in tiny_lm.model.parameters())
    assert fp["source"]["kind"] == "random"
    assert fp["source"]["seed"] == models.TINY_SEED
    assert fp["source"]["config"]["hidden_size"] == models.TINY_CONFIG["hidden_size"]
    json.dumps(fp)
    assert tiny_lm.device == torch.device("cpu")
    assert tiny_lm.dtype == torch.float32
    assert not tiny_lm.model.training
    assert tiny_lm.context_length == models.TINY_CONFIG["max_position_embeddings"]
    assert tiny_lm.is_chat
    assert tiny_lm.tokenizer.eos_token_id in tiny_lm.eos_token_ids
    assert tiny_lm.pad_token_id == tiny_lm.tokenizer.pad_token_id


def test_smollm2_fingerprint(smollm2_lm):
    fp = smollm2_lm.fingerprint
    assert fp["name"] == "smollm2-135m"
    assert fp["architecture"] == "LlamaForCausalLM"
    assert fp["dtype"] == "float32"
    assert 130e6 < fp["num_parameters"] < 140e6
    source = fp["source"]
    assert source["kind"] == "gguf-package"
    assert source["package"] == gguf.GGUF_PACKAGE
    assert source["file"] == gguf.GGUF_FILE
    assert len(source["sha256"]) == 64
    int(source["sha256"], 16)
    json.dumps(fp)


def test_distilgpt2_random_loads_and_both_engines_agree(gpt2_lm):
    fp = gpt2_lm.fingerprint
    assert fp["architecture"] == "GPT2LMHeadModel"
    assert fp["source"]["kind"] == "random"
    assert fp["source"]["config"] == "distilgpt2.json"
    assert gpt2_lm.context_length == 1024
    prompt = exact_length_ids(gpt2_lm.tokenizer, 9)
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    loop, ref = generate(gpt2_lm, prompt, params), hf_generate(gpt2_lm, prompt, params)
    assert loop.token_ids == ref.token_ids
    assert loop.output_tokens == 8
    assert generate(gpt2_lm, prompt, params, use_cache=False).token_ids == loop.token_ids


def test_local_model_directory_loads_like_the_original(tiny_lm, tmp_path):
    tiny_lm.model.save_pretrained(tmp_path)
    tiny_lm.tokenizer.save_pretrained(tmp_path)
    lm = load_model(EngineConfig(model=str(tmp_path), device="cpu"))
    assert lm.fingerprint["source"]["kind"] == "path"
    assert lm.fingerprint["source"]["path"] == str(tmp_path.resolve())
    assert lm.fingerprint["num_parameters"] == tiny_lm.fingerprint["num_parameters"]
    prompt = exact_length_ids(lm.tokenizer, 6)
    params = SamplingParams(max_new_tokens=5, ignore_eos=True)
    assert generate(lm, prompt, params).token_ids == generate(tiny_lm, prompt, params).token_ids


def test_unknown_name_raises_model_not_found_quickly(offline):
    with pytest.raises(ModelNotFound) as info:
        load_model(EngineConfig(model="no-such-org/no-such-model-llmbench", device="cpu"))
    message = str(info.value)
    assert "unknown model 'no-such-org/no-such-model-llmbench'" in message
    assert "tiny" in message and "smollm2-135m" in message  # it lists the registered names
    assert "\n" not in message


def test_unknown_random_architecture_raises_model_not_found(offline):
    with pytest.raises(ModelNotFound, match=r"no shipped config for 'gpt5'.*distilgpt2@random"):
        load_model(EngineConfig(model="gpt5@random", device="cpu"))


def test_existing_path_that_is_not_a_model_raises_model_not_found(tmp_path, offline):
    (tmp_path / "notes.txt").write_text("not a model")
    for path in (tmp_path, tmp_path / "notes.txt"):
        with pytest.raises(ModelNotFound, match="is not a model directory"):
            load_model(EngineConfig(model=str(path), device="cpu"))


def test_hub_counts_as_unreachable_when_offline(offline):
    assert models._hub_reachable() is False


def test_eos_ids_collects_every_source():
    class Obj:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    model = Obj(generation_config=Obj(eos_token_id=[2, 7]), config=Obj(eos_token_id=5))
    assert models._eos_ids(model, Obj(eos_token_id=None)) == frozenset({2, 5, 7})
    model = Obj(generation_config=Obj(eos_token_id=None), config=Obj(eos_token_id=None))
    assert models._eos_ids(model, Obj(eos_token_id=3)) == frozenset({3})
