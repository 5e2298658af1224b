"""Weight-only quantization (--weights): every linear layer is quantized, generation does
exactly the work asked for, the weights are recorded in the fingerprint and the run's
variant, and what a device or model cannot do is one user error before any load."""

from __future__ import annotations

import sys

import pytest
import torch

from llmbench.engine.config import EngineConfig, SamplingParams
from llmbench.engine.loop import generate
from llmbench.engine.models import load_model
from llmbench.engine.prompts import exact_length_ids
from llmbench.engine.quantized import check_weights_supported, int4_group_size
from llmbench.errors import UserError
from tests.test_cli import assert_user_error, run_main

CPU = torch.device("cpu")


@pytest.mark.parametrize("weights, dtype, kernel", [
    ("int8", "float32", "Int8Tensor"),
    ("int4", "bfloat16", "Int4OpaqueTensor"),
])
def test_every_linear_layer_is_quantized_and_generation_does_its_work(weights, dtype, kernel):
    lm = load_model(EngineConfig(model="tiny", device="cpu", dtype=dtype, weights=weights))
    linears = [m for m in lm.model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(type(m.weight).__name__ == kernel for m in linears), \
        {type(m.weight).__name__ for m in linears}
    recorded = lm.fingerprint["quantization"]
    assert recorded["weights"] == weights
    assert recorded["quantized_linear_layers"] == len(linears)
    assert recorded.get("group_size") == (64 if weights == "int4" else None)
    prompt = exact_length_ids(lm.tokenizer, 20)
    params = SamplingParams(max_new_tokens=6, ignore_eos=True)
    dynamic = generate(lm, prompt, params)
    assert len(dynamic.token_ids) == 6
    # The same numbers on either cache: quantized weights do not make the cache matter.
    assert generate(lm, prompt, params, kv_cache="static").token_ids == dynamic.token_ids


def test_native_weights_leave_the_fingerprint_and_variant_as_they_were(tiny_lm):
    assert "quantization" not in tiny_lm.fingerprint
    assert EngineConfig().variant == ""
    assert EngineConfig(weights="int8").variant == "int8-weights"
    assert EngineConfig(weights="int4", kv_cache="static", compile=True).variant == \
        "int4-weights-static-cache-compiled"
    with pytest.raises(UserError, match="unknown weights 'int2': choose one of native, "
                                        "packed, int8, int4"):
        EngineConfig(weights="int2")


@pytest.mark.parametrize("weights, device, dtype, message", [
    ("int8", "mps", torch.float16, "--weights int8 is not supported on mps"),
    ("int4", "cuda", torch.float16, "--weights int4 on cuda needs --dtype bfloat16"),
])
def test_what_a_device_cannot_run_is_a_user_error(weights, device, dtype, message):
    with pytest.raises(UserError, match=message):
        check_weights_supported(weights, torch.device(device), dtype)
    check_weights_supported("native", torch.device(device), dtype)  # always fine


def test_without_torchao_quantized_weights_say_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao", None)  # import torchao now raises
    with pytest.raises(UserError, match=r"--weights int8 needs torchao: pip install "
                                        r"torchao==0\.18\.0"):
        check_weights_supported("int8", CPU, torch.float32)
    check_weights_supported("native", CPU, torch.float32)


def _widths(*widths: int) -> torch.nn.Module:
    return torch.nn.Sequential(*(torch.nn.Linear(w, 8) for w in widths))


def test_int4_groups_are_the_largest_size_dividing_every_layer():
    assert int4_group_size(_widths(256, 1536)) == 128
    assert int4_group_size(_widths(576, 1536)) == 64  # smollm2-135m: 576 = 9 x 64
    assert int4_group_size(_widths(96, 128)) == 32
    with pytest.raises(UserError, match=r"widths \[48, 128\] are not all multiples of 32; "
                                        "use --weights int8"):
        int4_group_size(_widths(48, 128))


def test_generate_reports_its_weights_and_refuses_them_on_mps(capsys):
    code, out, err = run_main(["generate", "--model", "tiny", "--device", "cpu", "--weights",
                               "int8", "--max-new-tokens", "3", "--fixed-length"], capsys)
    assert code == 0, err
    assert err.splitlines()[-1].startswith("[tiny on cpu, loop, dynamic cache, int8 weights]")
    code, out, err = run_main(["generate", "--model", "tiny", "--device", "cpu", "--weights",
                               "int3"], capsys)
    assert_user_error(code, err, "--weights", "invalid choice: 'int3'")


def test_int4_matmuls_count_their_flops():
    """tinygemm's CPU kernel is not in PyTorch's FLOP table: counted as the matmul it is,
    an int4 layer does the FLOPs of the same layer in bfloat16."""
    from llmbench.engine.counting import count_work
    from llmbench.engine.quantized import quantize_weights

    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Linear(128, 64, bias=False)).to(torch.bfloat16)
    x = torch.randn(3, 128, dtype=torch.bfloat16)
    _, expected = count_work(plain, x)
    quantize_weights(plain, "int4", CPU)
    with torch.no_grad():
        _, work = count_work(plain, x)
    assert work.ops.get("aten::_weight_int4pack_mm_for_cpu") == 1
    assert work.flops == expected.flops == 2 * 3 * 64 * 128
