"""The machine-speed control: a fixed pure-torch workload timed throughout a run.

It does the same compute (matmuls) and memory traffic (a large reduction) every time, so
its time moves only when the machine does. Comparing its samples between two runs tells
"the machine was slower" apart from "the code was slower".
"""

from __future__ import annotations

import torch

from llmbench.engine.timing import Stopwatch

MATMUL_SIZE = 384
NUM_MATMULS = 6
STREAM_ELEMENTS = 8 * 1024 * 1024  # 32 MiB of float32: well past the caches


class ControlWorkload:
    """Allocates its tensors once; `measure()` returns one timing in seconds."""

    def __init__(self, device: torch.device):
        generator = torch.Generator().manual_seed(0)
        self.device = device
        self.a = torch.randn(MATMUL_SIZE, MATMUL_SIZE, generator=generator).to(device)
        self.b = torch.randn(MATMUL_SIZE, MATMUL_SIZE, generator=generator).to(device)
        self.stream = torch.ones(STREAM_ELEMENTS).to(device)

    def _run(self) -> float:
        out = self.a
        for _ in range(NUM_MATMULS):
            out = torch.tanh(out @ self.b)  # tanh keeps values bounded
        return float(out.sum() + self.stream.sum())

    @torch.inference_mode()
    def time_once(self) -> float:
        """One timing in seconds, warm-up and all: for watching the host round to round."""
        with Stopwatch(self.device) as watch:
            self._run()
        return watch.seconds

    @torch.inference_mode()
    def measure(self, repeats: int = 3) -> float:
        """Best of `repeats` timings: the minimum filters a stray context switch."""
        self._run()  # untimed: page in and pick kernels
        best = float("inf")
        for _ in range(repeats):
            with Stopwatch(self.device) as watch:
                self._run()
            best = min(best, watch.seconds)
        return best
