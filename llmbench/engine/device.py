"""Device, dtype and thread selection, device sync, and the memory probe.

Everything that differs between CPU, CUDA and Apple MPS lives here, so that the engine and
the benchmarks call one `sync()` and one `reset_peak_memory()`/`peak_memory()` pair whatever
they run on.
"""

from __future__ import annotations

import os
import platform
import resource
import sys

import torch

from llmbench.engine import cpu_features
from llmbench.engine.allocator import return_freed_memory
from llmbench.engine.config import DEVICES, DTYPES
from llmbench.errors import DeviceUnavailable, UserError


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def available_devices() -> tuple[str, ...]:
    """The concrete devices present here, best first."""
    found = []
    if torch.cuda.is_available():
        found.append("cuda")
    if _mps_available():
        found.append("mps")
    found.append("cpu")
    return tuple(found)


def resolve_device(name: str) -> torch.device:
    """Turn `auto|cpu|cuda|mps` into a present torch.device, or raise DeviceUnavailable."""
    if name not in DEVICES:
        raise UserError(f"unknown device {name!r}: choose one of {', '.join(DEVICES)}")
    present = available_devices()
    if name == "auto":
        return torch.device(present[0])
    if name not in present:
        raise DeviceUnavailable(
            f"device {name!r} is not available on this machine (present: {', '.join(present)});"
            " pass --device auto or one of those"
        )
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """Turn a dtype name into a torch.dtype; `auto` is float32 on CPU, bfloat16 on CUDA
    where supported (float16 otherwise), float16 on MPS."""
    if name not in DTYPES:
        raise UserError(f"unknown dtype {name!r}: choose one of {', '.join(DTYPES)}")
    if name != "auto":
        return getattr(torch, name)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


def has_native_bfloat16(device: torch.device) -> bool:
    """Whether `device` multiplies bfloat16 matrices in hardware. On a CPU without AVX512-BF16
    or AMX (`cpu_features.BF16_MATMUL`), torch converts every operand, and a compute-bound
    prefill runs several times slower in bfloat16 than in float32 (decode, bound by reading
    the weights, still gains; figures: docs/measurements/2026-12-01-engine-configurations.md)."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if device.type == "cpu":
        return cpu_features.has(cpu_features.BF16_MATMUL)
    return False  # MPS: bfloat16 runs (macOS 14+), but nothing here is measured on it


def set_threads(num_threads: int | None) -> int:
    """Pin torch's intra-op thread count (CPU); returns the count in force.

    Pinning matters for comparability: a baseline taken with 2 threads says nothing about
    a run with 8, so the count is recorded with every run.
    """
    if num_threads is not None:
        if num_threads < 1:
            raise UserError(f"--threads must be at least 1, got {num_threads}")
        torch.set_num_threads(num_threads)
    return torch.get_num_threads()


def sync(device: torch.device | str) -> None:
    """Wait until all queued work on `device` has finished.

    Every timed region ends here: without it, CUDA and MPS timings measure only the
    kernel launches. An unknown device type is an error, not a silent no-op.
    """
    kind = torch.device(device).type
    if kind == "cuda":
        torch.cuda.synchronize(device)
    elif kind == "mps":
        torch.mps.synchronize()
    elif kind != "cpu":
        raise ValueError(f"no sync defined for device type {kind!r}")


# Linux: writing 5 to clear_refs resets the process's peak RSS (VmHWM) to its current RSS,
# so each case gets a peak of its own; elsewhere the CPU figure is the process's peak.
_CLEAR_REFS = "/proc/self/clear_refs"
_STATUS = "/proc/self/status"
# The names each device's figures are recorded under: each says what its figure is.
PER_CASE_PEAK = "peak_memory_bytes"  # the peak in the case's window (CUDA; CPU on Linux)
PER_CASE_ADDED = "peak_memory_added_bytes"  # that peak above what was in use as it opened
PROCESS_PEAK = "process_peak_memory_bytes"  # the process's peak so far: order-dependent
ALLOCATED_NOW = "allocated_memory_bytes"  # MPS keeps no peak: allocated at the case's end


def _status_bytes(field: str) -> int | None:
    """A `VmXXX:` line of /proc/self/status, in bytes; None where there is none."""
    try:
        with open(_STATUS, encoding="ascii") as fh:
            for line in fh:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def reset_peak_memory(device: torch.device | str) -> int | None:
    """Start a new peak-memory window for the next case: the bytes in use as it starts, or
    None where the device has no window (MPS; a CPU outside Linux). On a CPU, freed memory
    is handed back first (`return_freed_memory`), so the window starts from what is in use."""
    kind = torch.device(device).type
    if kind == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return int(torch.cuda.memory_allocated(device))
    if kind == "cpu":
        return_freed_memory()
        try:
            with open(_CLEAR_REFS, "w", encoding="ascii") as fh:
                fh.write("5")
        except OSError:  # not Linux, or a kernel that refuses it
            return None
        return _status_bytes("VmRSS")
    return None


def peak_memory(device: torch.device | str, start: int | None) -> dict[str, int]:
    """The memory figures of a case whose window `reset_peak_memory` opened (`start`: what
    it returned), each under the name that says what it is (see the constants above)."""
    kind = torch.device(device).type
    if kind == "mps":
        return {ALLOCATED_NOW: int(torch.mps.current_allocated_memory())}
    if kind == "cuda":
        peak = int(torch.cuda.max_memory_allocated(device))
    elif kind == "cpu":
        peak = _status_bytes("VmHWM") if start is not None else None
        if peak is None:
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            # ru_maxrss is in KiB on Linux and in bytes on macOS.
            return {PROCESS_PEAK: int(rss if sys.platform == "darwin" else rss * 1024)}
    else:
        raise ValueError(f"no memory probe defined for device type {kind!r}")
    figures = {PER_CASE_PEAK: peak}
    if start is not None:
        figures[PER_CASE_ADDED] = max(0, peak - start)
    return figures


def peak_memory_bytes(device: torch.device | str) -> int:
    """The process's peak on CPU (see `peak_memory` for a case's own), the peak allocated on
    CUDA, allocated now on MPS."""
    return next(iter(peak_memory(device, None).values()))


def _cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: torch.device | str) -> str:
    """A human-readable, stable name for the hardware (CPU model or GPU name)."""
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda.get_device_name(device)
    if kind == "mps":
        return f"Apple MPS ({platform.machine()})"
    return _cpu_model_name()


def _memory_gib() -> int | None:
    """Physical memory in whole GiB (the same machine reports a few MiB more or less from one
    boot to the next)."""
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30)
    except (ValueError, OSError, AttributeError):
        return None


def _nvidia_driver() -> str | None:
    """The NVIDIA kernel driver's version, as Linux exposes it (no subprocess)."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as fh:
            first = fh.readline()
    except OSError:
        return None
    words = [w for w in first.split() if w[:1].isdigit() and "." in w]
    return words[0] if words else None


def testbed_facts() -> dict:
    """What a run records of its machine (`runs.testbed.FIELDS`), whatever device it ran on."""
    cuda = torch.cuda.is_available()
    return {
        "cpu_model": _cpu_model_name(),
        "logical_cpus": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "gpu_name": torch.cuda.get_device_name(0) if cuda else None,
        "gpu_count": torch.cuda.device_count() if cuda else 0,
        "gpu_driver": _nvidia_driver() if cuda else None,
        "cuda": torch.version.cuda,
        "mps": _mps_available(),
    }


def thread_environment() -> dict[str, str]:
    """The environment variables that change CPU kernel speed (threads, huge pages), for the
    run's record."""
    keys = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "KMP_AFFINITY",
            "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "THP_MEM_ALLOC_ENABLE")
    return {k: os.environ[k] for k in keys if k in os.environ}
