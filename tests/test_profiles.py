"""What each profile runs, as pytest collects the suite: the quick profile's engines group is
its named configurations at batch 1, the full profile's every configuration at batch 1 and 8,
and the sweeps' ids lead (`bs=1-loop`), as saved runs and their histories name them."""

from __future__ import annotations

import subprocess
import sys

import pytest
from gate_runs import REPO

from llmbench.bench.profiles import PROFILES


def _collected(*args: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "benchmarks", "--collect-only", "-q",
                           "-p", "no:cacheprovider", "--model", "tiny", *args],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [line.split("::", 1)[1] for line in proc.stdout.splitlines() if "::" in line]


@pytest.fixture(scope="module")
def quick() -> list[str]:
    return _collected()


@pytest.fixture(scope="module")
def full() -> list[str]:
    return _collected("--profile", "full")


def test_quick_runs_its_named_engine_configurations_at_batch_1(quick):
    engines = [case for case in quick if case.startswith("test_engine[")]
    assert engines == [f"test_engine[bs=1-{name}]"
                       for name in PROFILES["quick"].engine_configurations]
    assert "test_input_sweep[in=512-out=16]" in quick
    assert "test_server_concurrency[conc=8]" in quick
    assert len(quick) == 37


def test_a_sweep_the_profile_leaves_empty_deselects_its_cases(full, quick):
    # The server's capacity: each round a whole search, outside the quick profile, and not
    # listed there as a skip either.
    assert not [case for case in quick if case.startswith("test_server_capacity")]
    assert [case for case in full if case.startswith("test_server_capacity")] == [
        "test_server_capacity[ttft=3x]"]


def test_full_runs_every_engine_configuration_at_batch_1_and_8(full, quick):
    engines = [case for case in full if case.startswith("test_engine[")]
    at_1 = [case.removeprefix("test_engine[bs=1-") for case in engines if "[bs=1-" in case]
    at_8 = [case.removeprefix("test_engine[bs=8-") for case in engines if "[bs=8-" in case]
    assert at_1 == at_8 and len(engines) == 2 * len(at_1)
    quick_names = [f"{name}]" for name in PROFILES["quick"].engine_configurations]
    assert set(quick_names) < set(at_1)
    assert {"loop-eager-attn]", "hf-static]"} <= set(at_1) - set(quick_names)
    assert "test_input_sweep[in=512-out=32]" in full
