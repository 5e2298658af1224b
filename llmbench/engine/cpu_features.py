"""What this CPU can run: the one place that decides it, for the engine, the suite and the tests.

Two questions are easy to confuse, and each has its own check here:

- `ONEDNN_BF16` / `ONEDNN_FP16`: oneDNN has a 16-bit path on this CPU at all (AVX512 core
  or AVX-NE-CONVERT for bfloat16). Without it, reordering weights for oneDNN
  (`--weights packed`) raises inside torch, so the engine refuses before loading.
- `BF16_MATMUL`: the CPU multiplies bfloat16 in hardware (AVX512-BF16 or AMX). Without it,
  torch converts every operand: bfloat16 still runs, but a compute-bound prefill runs several
  times slower than in float32, so the suite's engines group does not time it.

Each answer comes from the library that will run the kernel (oneDNN's own ISA check for its
paths, torch's cpuinfo for the instruction sets), never from parsing /proc/cpuinfo: the
question is what torch will do here. `missing(feature)` says why in words a user can act on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Feature:
    key: str  # how tests and messages name it: onednn-bf16, onednn-fp16, bf16-matmul
    name: str
    needs: str  # the instruction sets that provide it, as a user reads them
    check: Callable[[], bool]


def _cpu_isa(name: str) -> Callable[[], bool]:
    def check() -> bool:
        probe = getattr(torch.cpu, name, None)  # torch's cpuinfo probes (private, stable)
        return bool(probe is not None and probe())

    return check


def _any(*checks: Callable[[], bool]) -> Callable[[], bool]:
    return lambda: any(check() for check in checks)


ONEDNN_BF16 = Feature("onednn-bf16", "oneDNN bfloat16", "AVX512 (BW, VL, DQ) or AVX-NE-CONVERT",
                      lambda: bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()))
ONEDNN_FP16 = Feature("onednn-fp16", "oneDNN float16", "AVX512-FP16 or AVX-NE-CONVERT",
                      lambda: bool(torch.ops.mkldnn._is_mkldnn_fp16_supported()))
BF16_MATMUL = Feature("bf16-matmul", "bfloat16 matmul in hardware", "AVX512-BF16 or AMX",
                      _any(_cpu_isa("_is_avx512_bf16_supported"),
                           _cpu_isa("_is_amx_tile_supported")))
FEATURES = {f.key: f for f in (ONEDNN_BF16, ONEDNN_FP16, BF16_MATMUL)}

# oneDNN's 16-bit path by dtype: what packing weights in that dtype needs.
ONEDNN_HALF = {torch.bfloat16: ONEDNN_BF16, torch.float16: ONEDNN_FP16}


def has(feature: Feature) -> bool:
    """Whether this CPU has `feature`, as the library that runs its kernels sees it."""
    return feature.check()


def missing(feature: Feature) -> str | None:
    """None when the CPU has `feature`; otherwise why not, naming what provides it."""
    if has(feature):
        return None
    return f"this CPU has no {feature.name} (it needs {feature.needs})"
