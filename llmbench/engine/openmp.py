"""OpenMP thread pools: one per thread that runs torch ops, and why a process should keep one.

torch's CPU kernels run on OpenMP. Each thread that starts a parallel region becomes the
master of a pool of worker threads, kept until that thread exits. Between regions the
workers spin a while before sleeping, so the next region starts at once; a decode step
runs hundreds of regions, so that spin is much of its speed. GNU OpenMP (the runtime in
torch's Linux wheels) spins only briefly once the process holds more pool threads than
CPUs: with two masters (the thread that loaded the model and a server's scheduler thread,
say) every region then waits for sleeping workers to wake, and a decode step on small,
many-region kernels (int4 weights) took twice as long
(figures: docs/measurements/2026-12-02-server-at-engine-speed.md).

`release_thread_pool` frees the calling thread's pool (OpenMP 5's
`omp_pause_resource_all`), so that a thread done with torch work for a while leaves the
process one pool: the server's scheduler releases its pool whenever it goes idle, and the
thread that loaded and warmed the model releases its own before the scheduler serves. A
thread's next parallel region builds a new pool (a few thread starts).
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os

OMP_PAUSE_HARD = 2  # omp_pause_resource_t: free the threads, not only idle them


@functools.cache
def _runtime() -> ctypes.CDLL | None:
    """The OpenMP runtime torch's kernels use, if it exports OpenMP 5's pause."""
    import torch

    if "OpenMP" not in torch.__config__.parallel_info():
        return None
    here = os.path.dirname(torch.__file__)
    # A wheel bundles its runtime (libgomp on Linux, libomp on macOS) beside libtorch;
    # else torch linked the system's, already loaded in this process.
    for path in sorted(glob.glob(os.path.join(here, "lib", "lib*omp*.so*"))
                       + glob.glob(os.path.join(here, "lib", "lib*omp*.dylib"))):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if hasattr(lib, "omp_pause_resource_all"):
            return lib
    lib = ctypes.CDLL(None)
    return lib if hasattr(lib, "omp_pause_resource_all") else None


def release_thread_pool() -> bool:
    """Free the calling thread's OpenMP pool; True when the runtime did (False: no OpenMP,
    a runtime without the OpenMP 5 pause, or the call refused, e.g. inside a region)."""
    runtime = _runtime()
    if runtime is None:
        return False
    runtime.omp_pause_resource_all.argtypes = (ctypes.c_int,)
    return runtime.omp_pause_resource_all(OMP_PAUSE_HARD) == 0
