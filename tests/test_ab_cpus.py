"""Both sides of a paired A/B start on the same CPUs when the suite leaves some unused."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from llmbench.ab import cpus

needs_affinity = pytest.mark.skipif(not hasattr(os, "sched_getaffinity"),
                                    reason="this OS has no CPU affinity (macOS)")


@pytest.mark.parametrize(("args", "threads"), [
    (["--model", "tiny", "--threads", "1"], 1),
    (["--threads=3", "-k", "decode"], 3),
    (["--model", "tiny"], None),
    (["--threads"], None),  # no value: the suite itself refuses it
    (["--threads=many"], None),
    (["--threads=\u00b2"], None),  # a digit to str.isdigit, not a number to int
    (["--threads", "1", "--threads=2"], 2),  # the last one, as pytest reads it
])
def test_the_suites_thread_count_is_read_off_its_arguments(args, threads):
    assert cpus.threads_of(args) == threads


@needs_affinity
def test_one_thread_on_four_cpus_shares_the_last_one(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert cpus.shared_cpus(["--threads", "1"]) == {3}
    assert cpus.shared_cpus(["--threads", "2"]) == {2, 3}


@needs_affinity
@pytest.mark.parametrize("args", [[], ["--threads", "4"], ["--threads", "8"]])
def test_a_suite_on_every_cpu_leaves_the_scheduler_alone(monkeypatch, args):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert cpus.shared_cpus(args) is None


def test_without_cpu_affinity_nothing_is_pinned(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    assert cpus.shared_cpus(["--threads", "1"]) is None


@needs_affinity
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 if hasattr(os, "sched_getaffinity")
                    else True, reason="needs two CPUs to choose from")
def test_a_child_started_inside_runs_on_the_set_and_the_parent_is_restored():
    before = os.sched_getaffinity(0)
    one = frozenset({max(before)})
    probe = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]
    with cpus.children_on(one):
        inside = subprocess.run(probe, capture_output=True, text=True, check=True)
    assert inside.stdout.strip() == str(sorted(one))
    assert os.sched_getaffinity(0) == before
    after = subprocess.run(probe, capture_output=True, text=True, check=True)
    assert after.stdout.strip() == str(sorted(before))
