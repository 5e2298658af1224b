"""The CUDA paths on a real GPU, unmocked: device selection, the synced stopwatch, the peak
memory window, bfloat16, and the engine's paths agreeing token for token. Skipped, with the
reason, where no CUDA device is present; `scripts/gpu_check.sh run` runs them on a GPU host
(the mocked selection tests in test_device.py run everywhere)."""

from __future__ import annotations

import pytest
import torch

from llmbench.engine import device as dev
from llmbench.engine.config import EngineConfig, SamplingParams
from llmbench.engine.hf import hf_generate
from llmbench.engine.loop import generate
from llmbench.engine.models import load_model
from llmbench.engine.prompts import exact_length_ids
from llmbench.engine.timing import Stopwatch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device here (torch.cuda.is_available() is False)")
CUDA = torch.device("cuda")


def test_auto_picks_the_gpu_and_its_precision():
    assert dev.available_devices()[0] == "cuda"
    assert dev.resolve_device("auto") == CUDA
    expected = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    assert dev.resolve_dtype("auto", CUDA) == expected
    assert dev.has_native_bfloat16(CUDA) is torch.cuda.is_bf16_supported()
    assert dev.device_name(CUDA) == torch.cuda.get_device_name(CUDA)


def test_the_stopwatch_waits_for_queued_kernels():
    a = torch.randn(4096, 4096, device=CUDA)
    with Stopwatch(CUDA) as watch:
        for _ in range(20):
            a = torch.tanh(a @ a)  # queued: returns before the GPU has done it
    # Read after a sync: nothing the timed block queued is still running.
    assert torch.cuda.current_stream().query()
    assert watch.seconds > 0


def test_each_case_gets_its_own_peak_memory_window():
    start = dev.reset_peak_memory(CUDA)
    block = torch.empty(256 * 2**20, dtype=torch.uint8, device=CUDA)
    figures = dev.peak_memory(CUDA, start)
    assert figures[dev.PER_CASE_PEAK] >= block.numel()
    assert figures[dev.PER_CASE_ADDED] >= block.numel()
    del block
    torch.cuda.empty_cache()
    start = dev.reset_peak_memory(CUDA)
    assert dev.peak_memory(CUDA, start)[dev.PER_CASE_ADDED] < 256 * 2**20


@pytest.fixture(scope="module")
def cuda_lm():
    return load_model(EngineConfig(model="tiny", device="cuda", dtype="float32"))


@pytest.mark.parametrize("kv_cache", ["dynamic", "static"])
def test_the_loop_and_generate_agree_token_for_token_on_the_gpu(cuda_lm, kv_cache):
    assert cuda_lm.device.type == "cuda"
    prompt = exact_length_ids(cuda_lm.tokenizer, 32)
    params = SamplingParams(max_new_tokens=12, ignore_eos=True)
    ours = generate(cuda_lm, prompt, params, kv_cache=kv_cache)
    theirs = hf_generate(cuda_lm, prompt, params)
    assert ours.output_tokens == 12
    assert ours.token_ids == theirs.token_ids


def test_bfloat16_runs_where_the_gpu_multiplies_it():
    if not torch.cuda.is_bf16_supported():
        pytest.skip(f"{torch.cuda.get_device_name(CUDA)} has no bfloat16")
    lm = load_model(EngineConfig(model="tiny", device="cuda", dtype="bfloat16"))
    assert lm.dtype == torch.bfloat16
    result = generate(lm, exact_length_ids(lm.tokenizer, 16),
                      SamplingParams(max_new_tokens=4, ignore_eos=True))
    assert result.output_tokens == 4
