"""Prepacked linear weights (--weights packed): every linear layer runs on oneDNN's packed
weight with nn.Linear's numbers, generation gives the native model's greedy tokens and
counts the same FLOPs, the packing is recorded, and what cannot run packed is one user
error before any load."""

from __future__ import annotations

import pytest
import torch

from llmbench.engine import cpu_features
from llmbench.engine.config import EngineConfig, SamplingParams
from llmbench.engine.counting import count_work
from llmbench.engine.loop import generate
from llmbench.engine.models import load_model
from llmbench.engine.packed import PackedLinear, check_packed_supported, pack_linear_weights
from llmbench.engine.prompts import exact_length_ids
from llmbench.errors import UserError
from tests.test_cli import assert_user_error, run_main

CPU = torch.device("cpu")


@pytest.mark.parametrize("dtype, tolerance", [
    (torch.float32, 1e-5),
    pytest.param(torch.bfloat16, 2e-2, marks=pytest.mark.needs_cpu(cpu_features.ONEDNN_BF16))])
@pytest.mark.parametrize("bias", [False, True])
def test_a_packed_layer_computes_what_nn_linear_does(dtype, tolerance, bias):
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48, bias=bias).to(dtype)
    packed = PackedLinear(linear)
    for shape in [(1, 64), (7, 64), (2, 5, 64)]:  # decode step, prefill, batch x tokens
        x = torch.randn(shape, dtype=dtype)
        with torch.no_grad():
            expected, got = linear(x), packed(x)
        assert got.shape == expected.shape and got.dtype == dtype
        torch.testing.assert_close(got, expected, rtol=tolerance, atol=tolerance)


def test_every_linear_layer_is_packed_and_recorded():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Sequential(torch.nn.Linear(16, 4)))
    assert pack_linear_weights(model) == {"weights": "packed", "packed_linear_layers": 2,
                                          "packed_for_batch": 1}
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert sum(isinstance(m, PackedLinear) for m in model.modules()) == 2
    # The packed weight is a buffer of the layer, never saved with the model.
    assert "0.packed_weight" not in model.state_dict()


def test_packed_generation_gives_the_native_tokens_and_counts_the_same_flops(tiny_lm):
    packed = load_model(EngineConfig(model="tiny", device="cpu", weights="packed"))
    assert packed.fingerprint["quantization"]["weights"] == "packed"
    assert not any(isinstance(m, torch.nn.Linear) for m in packed.model.modules())
    prompt = exact_length_ids(tiny_lm.tokenizer, 24)
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    native, native_work = count_work(generate, tiny_lm, prompt, params)
    result, work = count_work(generate, packed, prompt, params)
    assert result.token_ids == native.token_ids
    # The same multiplications by another kernel: one oneDNN linear per layer per forward
    # (the prefill and 7 decode steps), and the FLOPs PyTorch counts for the plain matmuls,
    # exactly.
    layers = sum(isinstance(m, torch.nn.Linear) for m in tiny_lm.model.modules())
    assert work.ops["mkldnn::_linear_pointwise"] == layers * 8
    assert "aten::mm" not in work.ops
    assert work.flops == native_work.flops > 0
    assert generate(packed, prompt, params, kv_cache="static").token_ids == native.token_ids


def test_packed_weights_have_their_own_variant():
    assert EngineConfig(weights="packed").variant == "packed-weights"
    assert EngineConfig(weights="packed", dtype="bfloat16").variant == "packed-weights"


@pytest.mark.parametrize("device", ["cuda", "mps"])
def test_packing_is_for_the_cpu_only(device):
    with pytest.raises(UserError, match=f"--weights packed is not supported on {device}"):
        check_packed_supported(torch.device(device))
    check_packed_supported(CPU)


@pytest.mark.parametrize("dtype, probe", [(torch.bfloat16, "_is_mkldnn_bf16_supported"),
                                          (torch.float16, "_is_mkldnn_fp16_supported")])
def test_half_precision_packs_only_where_onednn_runs_it(monkeypatch, dtype, probe, capsys):
    monkeypatch.setattr(torch.ops.mkldnn, probe, lambda: False)
    name = str(dtype).removeprefix("torch.")
    refusal = f"--weights packed in {name} needs oneDNN's {name} path: this CPU has no"
    with pytest.raises(UserError, match=refusal):
        check_packed_supported(CPU, dtype)
    check_packed_supported(CPU, torch.float32)
    code, _, err = run_main(["generate", "--model", "tiny", "--dtype", name, "--weights",
                             "packed"], capsys)
    assert_user_error(code, err, refusal, "use --dtype float32 or --weights native")


def test_a_torch_without_onednn_cannot_pack(monkeypatch):
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    with pytest.raises(UserError, match="needs a PyTorch built with oneDNN"):
        check_packed_supported(CPU)


def test_packed_weights_cannot_be_compiled():
    with pytest.raises(UserError, match="--weights packed runs eager"):
        EngineConfig(weights="packed", kv_cache="static", compile=True)


def test_the_cli_refuses_compiling_packed_weights_in_one_line(capsys):
    code, _, err = run_main(["generate", "--model", "tiny", "--weights", "packed",
                             "--cache", "static", "--compile"], capsys)
    assert_user_error(code, err, "--weights packed runs eager", "drop --compile")
