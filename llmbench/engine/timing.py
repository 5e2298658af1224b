"""The one device-synced stopwatch: every time taken around device work is read here.

CUDA and MPS queue kernels and return at once, so a clock read without a sync measures
only the launches. `device_clock` waits for the device and then reads the clock; `Stopwatch`
counts seconds from a start taken the same way. This module is the only place where a sync
and `time.perf_counter` are written together. Readings are on `perf_counter`'s timeline, so a
host-side timestamp (when a request arrived) can be subtracted from them.
"""

from __future__ import annotations

import time

import torch

from llmbench.engine.device import sync


def device_clock(device: torch.device | str) -> float:
    """`time.perf_counter()` once all work queued on `device` has finished."""
    sync(device)
    return time.perf_counter()


class Stopwatch:
    """Seconds since it started, each reading taken after a device sync.

        watch = Stopwatch(device)        # syncs, then starts
        ...; watch.elapsed()             # syncs, then reads; may be read many times

    or as a context manager, which reads it once on leaving the block:

        with Stopwatch(device) as watch:
            ...
        watch.seconds
    """

    def __init__(self, device: torch.device | str):
        self.device = device
        self.seconds: float | None = None  # set on leaving a `with` block
        self.start = device_clock(device)

    def elapsed(self) -> float:
        """Seconds from the start to now, once the device has finished its queued work."""
        return device_clock(self.device) - self.start

    def __enter__(self) -> Stopwatch:
        return self

    def __exit__(self, *exc_info) -> None:
        self.seconds = self.elapsed()
