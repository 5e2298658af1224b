"""pytest-benchmark's internals that llmbench takes over: a release without them fails here by
name, not in the middle of a paired A/B."""

from __future__ import annotations


def test_the_pytest_benchmark_internals_llmbench_relies_on_are_there():
    from llmbench.ab.pair_worker import missing_internals

    assert missing_internals() == [], (
        "pytest-benchmark changed the internals that llmbench ab's paired rounds and the "
        "suite's checked rounds rely on: adapt llmbench.ab.pair_worker and fixtures/timing.py"
        ", or pin pytest-benchmark to a release that has them")


def test_a_pytest_benchmark_without_them_is_named(monkeypatch):
    import pytest_benchmark.fixture as fixture

    from llmbench.ab.pair_worker import missing_internals

    monkeypatch.delattr(fixture.BenchmarkFixture, "_make_stats")
    assert missing_internals() == ["BenchmarkFixture._make_stats"]
