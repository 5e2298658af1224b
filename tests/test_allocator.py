"""Fixed malloc thresholds: a round that frees its large blocks does not fault them in again.

Each case runs in a fresh process, since the thresholds are process state: it allocates,
touches and frees 8 blocks of 4 MiB five times over and reports the minor page faults of
each pass (glibc's own malloc, through ctypes, so nothing else allocates in between).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from llmbench import ab
from llmbench.engine import allocator

pytestmark = pytest.mark.skipif(not allocator.uses_glibc(), reason="glibc's malloc only")

PASSES = textwrap.dedent("""
    import ctypes, resource, sys
    {prepare}
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = (ctypes.c_size_t,)
    libc.free.argtypes = (ctypes.c_void_p,)
    faults = []
    for _ in range(5):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        blocks = [libc.malloc(4 << 20) for _ in range(8)]
        for block in blocks:
            ctypes.memset(block, 1, 4 << 20)
        for block in blocks:
            libc.free(block)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    print(faults)
""")
PAGES_PER_PASS = 8 * (4 << 20) // os.sysconf("SC_PAGE_SIZE")
# A pass that reuses its blocks still may fault a stray page or two: the interpreter's own
# list growth, a page of the stack. Reused means under 1% of what a fresh pass faults.
STRAY_FAULTS = PAGES_PER_PASS // 100


def _faults_per_pass(prepare: str = "", env: dict | None = None) -> list[int]:
    proc = subprocess.run([sys.executable, "-c", PASSES.format(prepare=prepare)],
                          env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          check=True)
    return eval(proc.stdout)  # a printed list of ints


def _reused(later: list[int]) -> bool:
    return len(later) == 4 and all(f <= STRAY_FAULTS for f in later)


def test_glibc_left_to_itself_faults_the_same_blocks_in_every_pass(monkeypatch):
    # The premise: freed blocks go back to the kernel (trimmed, or unmapped) and come back
    # as fresh pages next time, so a pass's cost depends on the process's malloc state.
    for name in allocator.STEADY_MALLOC_ENV:
        monkeypatch.delenv(name, raising=False)
    later = _faults_per_pass()[1:]
    assert all(f >= PAGES_PER_PASS // 2 for f in later), later


def test_steady_malloc_faults_the_blocks_in_once(monkeypatch):
    for name in allocator.STEADY_MALLOC_ENV:
        monkeypatch.delenv(name, raising=False)
    faults = _faults_per_pass(
        "from llmbench.engine.allocator import steady_malloc; assert steady_malloc()")
    assert faults[0] >= PAGES_PER_PASS // 2 and _reused(faults[1:]), faults


def test_the_environment_it_gives_a_child_does_the_same(monkeypatch):
    for name in allocator.STEADY_MALLOC_ENV:
        monkeypatch.delenv(name, raising=False)
    env = allocator.steady_memory_env({})
    assert _reused(_faults_per_pass(env=env)[1:])


def test_loading_a_model_makes_the_process_steady(monkeypatch):
    for name in allocator.STEADY_MALLOC_ENV:
        monkeypatch.delenv(name, raising=False)
    load = ("from llmbench.engine.config import EngineConfig; "
            "from llmbench.engine.models import load_model; "
            "load_model(EngineConfig(model='tiny', device='cpu'))")
    assert _reused(_faults_per_pass(load)[1:])


def test_thresholds_the_user_set_are_left_alone(monkeypatch):
    mine = {"MALLOC_MMAP_THRESHOLD_": "65536"}
    env = allocator.steady_memory_env(mine)
    assert env["MALLOC_MMAP_THRESHOLD_"] == "65536" and "MALLOC_TRIM_THRESHOLD_" not in env
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")

    def no_mallopt(*args):
        raise AssertionError("mallopt called although the user set a threshold")

    monkeypatch.setattr(allocator.ctypes, "CDLL", no_mallopt)
    assert allocator.steady_malloc() is True


def test_both_sides_of_an_ab_run_get_the_same_thresholds(monkeypatch, tmp_path: Path):
    for name in allocator.STEADY_MALLOC_ENV:
        monkeypatch.delenv(name, raising=False)
    for name in ("baseline", "candidate"):
        env = ab.side_env(ab.Checkout(name, tmp_path))
        assert {k: env[k] for k in allocator.STEADY_MALLOC_ENV} == allocator.STEADY_MALLOC_ENV
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    env = ab.side_env(ab.Checkout("baseline", tmp_path))
    assert env["MALLOC_MMAP_THRESHOLD_"] == "65536" and "MALLOC_TRIM_THRESHOLD_" not in env


def _thp_mode() -> str | None:
    """The kernel's transparent huge page mode (always, madvise, never); None if unknown."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return None
    return text[text.index("[") + 1:text.index("]")]


HUGE_PAGES_AFTER_LOAD = textwrap.dedent("""
    from llmbench.engine.config import EngineConfig
    from llmbench.engine.models import load_model
    load_model(EngineConfig(model="tiny", device="cpu", threads=1))
    rollup = open("/proc/self/smaps_rollup").read().splitlines()
    print(next(int(line.split()[1]) for line in rollup if line.startswith("AnonHugePages")))
""")


def _huge_kib_after_loading_tiny(env: dict[str, str]) -> int:
    proc = subprocess.run([sys.executable, "-c", HUGE_PAGES_AFTER_LOAD], env=env,
                          capture_output=True, text=True, check=True)
    return int(proc.stdout.split()[-1])


@pytest.mark.skipif(_thp_mode() not in ("madvise", "always"),
                    reason="the kernel gives no transparent huge pages")
def test_a_process_that_loads_a_model_holds_its_weights_on_huge_pages():
    # tiny's tied embedding is vocabulary x 64 floats, some 12 MiB: several huge pages.
    env = {k: v for k, v in os.environ.items() if k not in allocator.STEADY_PAGES_ENV}
    assert _huge_kib_after_loading_tiny(env) >= 4 * 2048


@pytest.mark.skipif(_thp_mode() != "madvise", reason="only madvise mode needs torch to ask")
def test_a_user_who_turns_huge_pages_off_is_obeyed():
    env = {**os.environ, "THP_MEM_ALLOC_ENABLE": "0"}
    assert _huge_kib_after_loading_tiny(env) == 0


def test_both_sides_of_an_ab_run_ask_for_huge_pages(monkeypatch, tmp_path: Path):
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    for name in ("baseline", "candidate"):
        assert ab.side_env(ab.Checkout(name, tmp_path))["THP_MEM_ALLOC_ENABLE"] == "1"
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "0")
    assert ab.side_env(ab.Checkout("baseline", tmp_path))["THP_MEM_ALLOC_ENABLE"] == "0"
