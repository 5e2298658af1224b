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

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Probe:
    """One of torch's own checks, looked up when asked: a test (or `--hide-cpu-feature`) that
    replaces the check where torch keeps it changes every answer drawn from it."""

    owner: object  # torch.cpu, torch.ops.mkldnn
    name: str

    def __call__(self) -> bool:
        try:
            check = getattr(self.owner, self.name)
        except (AttributeError, RuntimeError):  # a torch build without this probe
            return False
        return bool(check())


@dataclass(frozen=True)
class Feature:
    key: str  # how tests and messages name it: onednn-bf16, onednn-fp16, bf16-matmul
    name: str
    needs: str  # the instruction sets that provide it, as a user reads them
    probes: tuple[Probe, ...]  # the CPU has the feature when any of them says so


ONEDNN_BF16 = Feature("onednn-bf16", "oneDNN bfloat16", "AVX512 (BW, VL, DQ) or AVX-NE-CONVERT",
                      (Probe(torch.ops.mkldnn, "_is_mkldnn_bf16_supported"),))
ONEDNN_FP16 = Feature("onednn-fp16", "oneDNN float16", "AVX512-FP16 or AVX-NE-CONVERT",
                      (Probe(torch.ops.mkldnn, "_is_mkldnn_fp16_supported"),))
# torch's cpuinfo probes (private, stable)
BF16_MATMUL = Feature("bf16-matmul", "bfloat16 matmul in hardware", "AVX512-BF16 or AMX",
                      (Probe(torch.cpu, "_is_avx512_bf16_supported"),
                       Probe(torch.cpu, "_is_amx_tile_supported")))
FEATURES = {f.key: f for f in (ONEDNN_BF16, ONEDNN_FP16, BF16_MATMUL)}

# oneDNN's 16-bit path by dtype: what packing weights in that dtype needs.
ONEDNN_HALF = {torch.bfloat16: ONEDNN_BF16, torch.float16: ONEDNN_FP16}


def has(feature: Feature) -> bool:
    """Whether this CPU has `feature`, as the library that runs its kernels sees it."""
    return any(probe() for probe in feature.probes)


def missing(feature: Feature) -> str | None:
    """None when the CPU has `feature`; otherwise why not, naming what provides it."""
    if has(feature):
        return None
    return f"this CPU has no {feature.name} (it needs {feature.needs})"
