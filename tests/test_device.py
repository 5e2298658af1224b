"""Device, dtype and thread selection, sync and the memory probe, with the hardware mocked."""

from __future__ import annotations

import os
from unittest import mock

import numpy as np
import pytest
import torch

from llmbench.engine import allocator
from llmbench.engine import device as dev
from llmbench.engine.config import EngineConfig
from llmbench.errors import DeviceUnavailable, UserError


@pytest.fixture
def hardware(monkeypatch):
    """Pretend the machine has the given accelerators: hardware(cuda=..., mps=...)."""

    def present(cuda: bool = False, mps: bool = False) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        monkeypatch.setattr(dev, "_mps_available", lambda: mps)

    return present


@pytest.mark.parametrize("cuda, mps, expected", [
    (True, True, ("cuda", "mps", "cpu")),
    (True, False, ("cuda", "cpu")),
    (False, True, ("mps", "cpu")),
    (False, False, ("cpu",)),
])
def test_auto_prefers_cuda_then_mps_then_cpu(hardware, cuda, mps, expected):
    hardware(cuda=cuda, mps=mps)
    assert dev.available_devices() == expected
    assert dev.resolve_device("auto") == torch.device(expected[0])
    for name in expected:
        assert dev.resolve_device(name) == torch.device(name)


@pytest.mark.parametrize("cuda, mps, absent, present", [
    (False, False, "cuda", "cpu"),
    (False, True, "cuda", "mps, cpu"),
    (True, False, "mps", "cuda, cpu"),
])
def test_absent_device_names_what_is_present(hardware, cuda, mps, absent, present):
    hardware(cuda=cuda, mps=mps)
    with pytest.raises(DeviceUnavailable) as info:
        dev.resolve_device(absent)
    message = str(info.value)
    assert message.startswith(f"device {absent!r} is not available on this machine")
    assert f"(present: {present})" in message
    assert "\n" not in message


def test_unknown_device_and_dtype_names_are_user_errors():
    with pytest.raises(UserError, match="unknown device 'tpu'") as info:
        dev.resolve_device("tpu")
    assert not isinstance(info.value, DeviceUnavailable)
    with pytest.raises(UserError, match="unknown dtype 'float8'"):
        dev.resolve_dtype("float8", torch.device("cpu"))


@pytest.mark.parametrize("bf16, expected", [(True, torch.bfloat16), (False, torch.float16)])
def test_auto_dtype_on_cuda_follows_bf16_support(monkeypatch, bf16, expected):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    assert dev.resolve_dtype("auto", torch.device("cuda")) == expected


def test_auto_dtype_on_cpu_and_mps():
    assert dev.resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert dev.resolve_dtype("auto", torch.device("mps")) == torch.float16


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16"])
def test_explicit_dtype_is_kept_on_every_device(name):
    for device in ("cpu", "cuda", "mps"):
        assert dev.resolve_dtype(name, torch.device(device)) == getattr(torch, name)


def test_sync_cuda_and_mps_call_their_synchronize(monkeypatch):
    cuda_sync, mps_sync = mock.Mock(), mock.Mock()
    monkeypatch.setattr(torch.cuda, "synchronize", cuda_sync)
    monkeypatch.setattr(torch.mps, "synchronize", mps_sync)
    dev.sync("cuda")
    cuda_sync.assert_called_once_with("cuda")
    dev.sync(torch.device("mps"))
    mps_sync.assert_called_once_with()
    dev.sync("cpu")  # nothing to wait for
    assert cuda_sync.call_count == 1 and mps_sync.call_count == 1


def test_sync_on_an_unknown_device_type_raises():
    with pytest.raises(ValueError, match="no sync defined for device type 'meta'"):
        dev.sync("meta")


def test_peak_memory(monkeypatch):
    assert dev.peak_memory_bytes("cpu") > 0
    assert dev.peak_memory_bytes(torch.device("cpu")) > 0
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: 12345)
    assert dev.peak_memory_bytes("cuda") == 12345
    reset = mock.Mock()
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: 100)
    assert dev.reset_peak_memory("cuda") == 100
    reset.assert_called_once_with("cuda")
    dev.reset_peak_memory("cpu")
    assert reset.call_count == 1
    with pytest.raises(ValueError, match="no memory probe"):
        dev.peak_memory_bytes("meta")


def test_set_threads():
    before = torch.get_num_threads()
    try:
        assert dev.set_threads(None) == before
        assert dev.set_threads(2) == 2
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    for bad in (0, -1):
        with pytest.raises(UserError, match=f"--threads must be at least 1, got {bad}"):
            dev.set_threads(bad)
    assert torch.get_num_threads() == before


def test_engine_config_validates_device_dtype_threads():
    assert EngineConfig().device == "auto" and EngineConfig().dtype == "auto"
    with pytest.raises(UserError, match="unknown device 'tpu'"):
        EngineConfig(device="tpu")
    with pytest.raises(UserError, match="unknown dtype 'int4'"):
        EngineConfig(dtype="int4")
    with pytest.raises(UserError, match="--threads must be at least 1"):
        EngineConfig(threads=0)
    with pytest.raises(UserError, match="--model must not be empty"):
        EngineConfig(model="")


def test_device_name_and_thread_environment(monkeypatch):
    assert isinstance(dev.device_name("cpu"), str) and dev.device_name("cpu")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    env = dev.thread_environment()
    assert env["OMP_NUM_THREADS"] == "3"
    assert "MKL_NUM_THREADS" not in env


@pytest.mark.parametrize("kind, cuda_bf16, cpu_bf16, expected", [
    ("cuda", True, False, True),
    ("cuda", False, True, False),
    ("cpu", False, True, True),   # AVX512-BF16 or AMX
    ("cpu", True, False, False),  # AVX2 only: emulated, the engines group skips bfloat16
    ("mps", True, True, False),
])
def test_native_bfloat16_follows_the_device_own_check(monkeypatch, kind, cuda_bf16,
                                                      cpu_bf16, expected):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: cuda_bf16)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: cpu_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert dev.has_native_bfloat16(torch.device(kind)) is expected


def _touch(nbytes: int) -> np.ndarray:
    block = np.empty(nbytes, dtype=np.uint8)
    block[::4096] = 1  # every page resident
    return block


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="Linux only")
def test_a_cpu_case_reports_its_own_peak_not_an_earlier_case_s():
    """~1 GiB in one case, then ~0.5 GiB in the next: the second reports about 0.5 GiB added,
    and a peak about 0.5 GiB above where it started, not the first case's 1 GiB (a never
    reset high-water mark would)."""
    start = dev.reset_peak_memory("cpu")
    big = _touch(1 << 30)
    first = dev.peak_memory("cpu", start)
    del big
    start = dev.reset_peak_memory("cpu")
    small = _touch(1 << 29)
    second = dev.peak_memory("cpu", start)
    del small
    assert first[dev.PER_CASE_ADDED] > 0.9 * (1 << 30)
    assert 0.45 * (1 << 30) < second[dev.PER_CASE_ADDED] < 0.6 * (1 << 30)
    assert 0.45 * (1 << 30) < second[dev.PER_CASE_PEAK] - start < 0.6 * (1 << 30)


def test_without_a_window_the_cpu_figure_is_named_the_process_peak(monkeypatch):
    monkeypatch.setattr(dev, "_CLEAR_REFS", "/nonexistent/clear_refs")
    assert dev.reset_peak_memory("cpu") is None
    (name, value), = dev.peak_memory("cpu", None).items()
    assert name == dev.PROCESS_PEAK and value > 0
    monkeypatch.setattr(torch.mps, "current_allocated_memory", lambda: 7)
    assert dev.peak_memory("mps", None) == {dev.ALLOCATED_NOW: 7}
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: 500)
    assert dev.peak_memory("cuda", 200) == {dev.PER_CASE_PEAK: 500, dev.PER_CASE_ADDED: 300}


@pytest.mark.skipif(not allocator.uses_glibc() or not os.path.exists("/proc/self/status"),
                    reason="glibc on Linux only")
def test_freed_memory_is_handed_back_before_a_window_opens():
    """Freed heap memory the allocator kept stays resident, so a window opened over it would
    start from a figure that depends on what ran before; handed back, the start is what is
    in use."""
    blocks = [b"\1" * 100_000 for _ in range(2_000)]  # ~200 MB under the mmap threshold
    pinned = b"\1" * 100_000  # above them on the heap: the heap's top cannot shrink
    before = dev._status_bytes("RssAnon")
    del blocks
    kept = dev._status_bytes("RssAnon")
    dev.return_freed_memory()
    handed_back = dev._status_bytes("RssAnon")
    del pinned
    assert before - kept < 50 * 2**20, "the allocator handed the blocks back by itself"
    assert kept - handed_back > 150 * 2**20


def test_a_cpu_window_opens_after_freed_memory_is_handed_back(monkeypatch):
    calls = []
    monkeypatch.setattr(dev, "return_freed_memory", lambda: calls.append("handed back"))
    dev.reset_peak_memory("cpu")
    assert calls == ["handed back"]
