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


def test_a_plugin_that_no_longer_keeps_its_session_on_the_config_is_named(monkeypatch):
    import pytest_benchmark.plugin as plugin

    from llmbench.ab.pair_worker import missing_internals

    def pytest_configure(config):  # a release that keeps its session elsewhere
        config.stash["benchmark session"] = object()

    monkeypatch.setattr(plugin, "pytest_configure", pytest_configure)
    assert missing_internals() == ["config._benchmarksession"]


def test_a_session_without_its_benchmarks_is_named(monkeypatch):
    import pytest_benchmark.session as session

    from llmbench.ab.pair_worker import missing_internals

    class BenchmarkSession:  # a release that renamed what the suite reads
        def __init__(self, config):
            self.disabled = False

        def get_machine_info(self):
            return {}

    monkeypatch.setattr(session, "BenchmarkSession", BenchmarkSession)
    assert missing_internals() == ["BenchmarkSession.benchmarks"]
