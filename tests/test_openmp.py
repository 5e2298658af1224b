"""Releasing a thread's OpenMP pool: the workers a thread got from its first parallel region
are gone afterwards, and the thread works on with a new pool."""

import os
import sys
import threading

import pytest
import torch

from llmbench.engine.openmp import release_thread_pool

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or "OpenMP" not in torch.__config__.parallel_info(),
    reason="counts the process's threads in /proc; torch here runs on OpenMP")


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_release_frees_the_calling_threads_workers_and_work_goes_on():
    seen = {}

    def work():
        torch.set_num_threads(2)  # this thread's regions: a master and one worker
        seen["before"] = _threads()
        big = torch.ones(1 << 22)
        big.mul_(2)  # a parallel region: this thread becomes a master with its own workers
        seen["with pool"] = _threads()
        seen["released"] = release_thread_pool()
        seen["after"] = _threads()
        seen["sum"] = float(big.mul_(2).sum())  # a new pool, the same answer

    before = torch.get_num_threads()
    thread = threading.Thread(target=work)
    try:
        thread.start()
        thread.join()
    finally:
        torch.set_num_threads(before)
    assert seen["with pool"] > seen["before"]
    assert seen["released"] and seen["after"] == seen["before"]
    assert seen["sum"] == 4.0 * (1 << 22)
