"""The device-synced stopwatch: every reading waits for the device first."""

import pytest

from llmbench.engine import timing


@pytest.fixture
def calls(monkeypatch):
    """Record sync and clock calls in order; the clock ticks 1.0, 2.5, 4.0, ..."""
    log = []
    ticks = iter([1.0, 2.5, 4.0, 7.0])
    monkeypatch.setattr(timing, "sync", lambda device: log.append(("sync", device)))

    def clock():
        log.append(("clock",))
        return next(ticks)

    monkeypatch.setattr(timing.time, "perf_counter", clock)
    return log


def test_each_reading_syncs_before_the_clock(calls):
    watch = timing.Stopwatch("cuda")
    assert watch.elapsed() == 1.5
    assert watch.elapsed() == 3.0
    assert calls == [("sync", "cuda"), ("clock",)] * 3


def test_as_a_context_manager_it_reads_once_on_leaving(calls):
    with timing.Stopwatch("mps") as watch:
        assert watch.seconds is None
    assert watch.seconds == 1.5
    assert calls == [("sync", "mps"), ("clock",)] * 2


def test_an_unknown_device_is_an_error_not_an_unsynced_time():
    with pytest.raises(ValueError, match="no sync defined for device type 'meta'"):
        timing.Stopwatch("meta")


def test_cpu_readings_are_real_seconds():
    watch = timing.Stopwatch("cpu")
    assert 0 <= watch.elapsed() <= watch.elapsed()
