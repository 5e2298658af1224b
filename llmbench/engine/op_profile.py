"""Where a decode step's time goes: torch.profiler's ops, per decode step.

One generation of `new_tokens` tokens and one of a single token (prefill and the first
token only) are profiled after an unprofiled warm-up (which also compiles a compiled path);
each op's self time in the second is subtracted from the first and divided by the decode
steps, which leaves what one decode step spends in each op. On CUDA, ops are ranked by
their device time (the kernels), elsewhere by CPU time; on MPS the CPU time is only the
time to queue the work.

Self times cover the time inside ops only. What an unprofiled step takes beyond their sum
is spent outside any op: Python (transformers' modules, our loop), the dispatcher, the
allocator. The profiler slows every op a little, so that remainder is a lower bound.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import Counter
from dataclasses import dataclass

from llmbench.engine.config import SamplingParams
from llmbench.engine.loop import generate
from llmbench.engine.models import LoadedModel


@dataclass(frozen=True)
class OpTime:
    name: str
    ms_per_step: float
    calls_per_step: float


@dataclass(frozen=True)
class DecodeProfile:
    ops: tuple[OpTime, ...]  # every op, the costliest first
    decode_ms_per_token: float  # unprofiled, from the warm-up generation
    clock: str  # "cpu" or "device": which time ranks the ops

    @property
    def profiled_ms_per_step(self) -> float:
        return sum(op.ms_per_step for op in self.ops)


@contextlib.contextmanager
def _stderr_fd_silenced():
    """The profiler's C++ side writes a notice to file descriptor 2 at every start and stop,
    past Python's sys.stderr; an exception raised inside still reaches the user after."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _self_times(lm: LoadedModel, prompt: list[int], new_tokens: int, kv_cache: str,
                on_device: bool) -> tuple[Counter, Counter]:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_device else [])
    params = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    with _stderr_fd_silenced(), profile(activities=activities) as prof:
        generate(lm, prompt, params, kv_cache=kv_cache)
    us, calls = Counter(), Counter()
    for event in prof.key_averages():
        us[event.key] += event.self_device_time_total if on_device else event.self_cpu_time_total
        calls[event.key] += event.count
    return us, calls


def decode_profile(lm: LoadedModel, prompt: list[int], new_tokens: int,
                   kv_cache: str) -> DecodeProfile:
    """Each op's self time per decode step of a `new_tokens`-token greedy generation."""
    if new_tokens < 2:
        raise ValueError("a decode step needs at least 2 new tokens")
    on_device = lm.device.type == "cuda"
    params = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    for _ in range(2):  # warm: allocator, kernel choice, and compiling every shape
        warm = generate(lm, prompt, params, kv_cache=kv_cache)
        generate(lm, prompt, SamplingParams(max_new_tokens=1, ignore_eos=True),
                 kv_cache=kv_cache)
    full_us, full_calls = _self_times(lm, prompt, new_tokens, kv_cache, on_device)
    prefill_us, prefill_calls = _self_times(lm, prompt, 1, kv_cache, on_device)
    steps = new_tokens - 1
    ops = [OpTime(name, (full_us[name] - prefill_us[name]) / 1000.0 / steps,
                  (full_calls[name] - prefill_calls[name]) / steps)
           for name in full_us]
    ops = sorted((op for op in ops if op.ms_per_step > 0), key=lambda op: -op.ms_per_step)
    return DecodeProfile(tuple(ops), warm.decode_ms_per_token,
                         "device" if on_device else "cpu")
