"""Which engine cases each profile collects: every configuration at batch 1; at batch 8 all of
them in `full`, and in `quick` the reference and the fast paths its budget keeps. Real
collection of the suite's engines module (no model is loaded to collect)."""

from __future__ import annotations

import re

import pytest
from gate_runs import REPO, run_pytest

from llmbench.bench.profiles import PROFILES


def collected_engine_cases(profile: str) -> dict[int, list[str]]:
    proc = run_pytest(REPO, "--collect-only", "-q", "-p", "no:cacheprovider", "--profile",
                      profile, "benchmarks/test_engines.py")
    assert proc.returncode == pytest.ExitCode.OK, proc.stdout[-2000:] + proc.stderr[-2000:]
    cases: dict[int, list[str]] = {}
    for batch, name in re.findall(r"test_engine\[bs=(\d+)-([\w-]+)\]", proc.stdout):
        cases.setdefault(int(batch), []).append(name)
    return cases


@pytest.fixture(scope="module")
def quick_and_full():
    return collected_engine_cases("quick"), collected_engine_cases("full")


def test_batch_one_runs_every_configuration_in_both_profiles(quick_and_full):
    quick, full = quick_and_full
    assert quick[1] == full[1]
    assert {"loop", "loop-static", "loop-static-compiled", "hf-static-compiled",
            "loop-eager-attn", "loop-packed"} <= set(quick[1])


def test_full_runs_every_configuration_batched_too(quick_and_full):
    _, full = quick_and_full
    assert full[8] == full[1]


def test_quick_batches_only_the_configurations_it_names(quick_and_full):
    quick, _ = quick_and_full
    named = PROFILES["quick"].batched_engines
    # Every name the profile keeps is a real configuration: a misspelt one would silently
    # drop that case from every run.
    assert set(named) <= set(quick[1])
    assert quick[8] == [name for name in quick[1] if name in named]
    assert "loop" in quick[8]  # the reference the batched fast paths are read against
    assert not {"hf", "hf-static", "loop-static", "loop-eager-attn"} & set(quick[8])
