"""Steady host memory: glibc's malloc with fixed thresholds and PyTorch's large blocks on huge
pages, so every process pays the same.

glibc serves an allocation above its mmap threshold with fresh pages from the kernel and
hands them back on free, so each such allocation page-faults anew. It also raises that
threshold, up to 32 MiB, whenever the process frees such a block. How often a benchmark's
rounds fault therefore depends on what the process happened to allocate before, and it
stays that way for the process's life: on the same prefill one fresh process may fault
many times as often as another, and a paired A/A of two processes running the same code
then calls that prefill faster or slower, well beyond the gate's threshold
(figures: docs/measurements/2026-12-01-paired-ab.md, and for that A/A
docs/measurements/2026-12-01-from-the-code.md). That is noise no pairing of rounds can
cancel, since each side is one process.

With both thresholds fixed (`mallopt`, which also turns the adjustment off) the same
prefill took no page fault in any process. Every process that loads a model here fixes
them (`steady_malloc`), and `llmbench ab` sets the same values in the environment of both
sides (`STEADY_MALLOC_ENV`), so a revision that predates this module measures the same way.
A value the user set in the environment is left alone. Other C libraries (macOS, musl)
are left alone too: this is glibc's behaviour.

Huge pages. With 4 KiB pages, each process maps its weights onto its own scatter of physical
pages, and how well those fit the TLB and the physically indexed caches is drawn once, when
the process loads, and kept for its life. A decode step that streams a large matrix then ran
faster in one process than in another of the same code, beyond the gate's threshold, and a
paired A/A of two processes called it a regression (figures:
docs/measurements/2026-12-07-huge-pages.md). PyTorch backs every CPU allocation of 2 MiB or
more with transparent huge pages when `THP_MEM_ALLOC_ENABLE` is set (it aligns the block and
`madvise`s it; the kernel's THP mode must be `madvise` or `always`), which leaves the draw
far fewer pages to scatter. PyTorch reads that variable once, at its first allocation, so
llmbench sets it when it is imported (`steady_pages`), before torch has allocated anything,
and `llmbench ab` passes it to both sides with the malloc thresholds.
"""

from __future__ import annotations

import ctypes
import gc
import os
import platform

# glibc's ceiling for the mmap threshold on 64-bit (HEAP_MAX_SIZE / 2): blocks up to it
# come from the heap and are reused, larger ones are rare enough not to matter.
MMAP_THRESHOLD = 32 * 1024 * 1024
# Free memory kept at the top of the heap instead of being trimmed (and faulted in again).
TRIM_THRESHOLD = 256 * 1024 * 1024
STEADY_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD),
                     "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD)}
STEADY_PAGES_ENV = {"THP_MEM_ALLOC_ENABLE": "1"}
_M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
_M_MMAP_THRESHOLD = -3


def on_linux() -> bool:
    """Linux: where both steadied here live, glibc's malloc thresholds (with glibc) and
    the transparent huge pages PyTorch asks for under THP_MEM_ALLOC_ENABLE."""
    return platform.system() == "Linux"


def uses_glibc() -> bool:
    return on_linux() and platform.libc_ver()[0] == "glibc"


def steady_malloc() -> bool:
    """Fix glibc's mmap and trim thresholds in this process, unless the environment already
    sets either; True when the thresholds in force are fixed ones (ours or the user's)."""
    if not uses_glibc():
        return False
    if any(name in os.environ for name in STEADY_MALLOC_ENV):
        return True  # glibc applied the user's values at start-up, adjustment off
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def steady_pages() -> bool:
    """Ask PyTorch for huge pages under its large CPU blocks, unless the environment already
    says; True when they are asked for. Only an allocation after torch's first one misses it:
    call this before anything allocates a tensor (llmbench does on import)."""
    if not on_linux():
        return False
    for name, value in STEADY_PAGES_ENV.items():
        os.environ.setdefault(name, value)
    return all(os.environ[name] == value for name, value in STEADY_PAGES_ENV.items())


def steady_memory_env(environ: dict[str, str]) -> dict[str, str]:
    """`environ` plus the fixed malloc thresholds and huge pages for a child process, each
    where the user set none of its variables."""
    env = dict(environ)
    if uses_glibc() and not any(name in environ for name in STEADY_MALLOC_ENV):
        env.update(STEADY_MALLOC_ENV)
    if on_linux() and not any(name in environ for name in STEADY_PAGES_ENV):
        env.update(STEADY_PAGES_ENV)
    return env


def return_freed_memory() -> None:
    """Collect Python's garbage and hand the C heap's free pages back to the kernel
    (glibc's `malloc_trim`; the trim threshold above keeps them otherwise).

    Memory a process has freed but the allocator kept stays resident. Whether it is there
    when a case's memory window opens depends on what ran before and on the allocator's
    history, so a resident high-water mark measured from such a start moved between
    processes of the same code by far more than a round of a small model needs (figures:
    docs/measurements/2026-12-06-memory-window.md). After this, what is resident is what is
    in use, and a round's growth above it is what the round needs.
    """
    gc.collect()
    if uses_glibc():
        ctypes.CDLL(None).malloc_trim(0)
