"""The pytest plugin that each side of a paired `llmbench ab` runs under: turn-taking.

`llmbench ab` (the coordinator, `pairing`) starts the baseline's suite and the candidate's
as two long-lived pytest processes and loads this module into both with `-p`. It makes
every benchmark round wait for its turn: before each round the process asks the
coordinator over a Unix socket and blocks (no spinning) until told "go", "stop" (no more
rounds for this benchmark) or "skip". So the two processes never run at the same moment,
and the coordinator decides how many rounds each benchmark gets.

REV's side runs REV's own llmbench, which may have no pairing code at all (any revision
with the benchmark suite). So this module is self-contained: the standard library, pytest
and pytest-benchmark only, never `llmbench`; the coordinator copies it out of the package
under its own module name. It takes over `BenchmarkFixture._raw_pedantic` (and `_raw`),
through which every round of every benchmark passes, whatever the suite's code.

Exclusive turns: a process runs only between a reply and its next request. It asks before
collection ends (so model loading and warm-up of one side never overlap the other's
rounds), before setting up each benchmark (so one the budget cannot reach is skipped before
its fixtures and its body load, compile or check anything), before each round, and tells
the coordinator when its session is over. Only
collection, which times nothing, runs on both sides at once.

Messages are JSON lines: requests ["hello", side, pid], ["collected", ids, device],
["item", nodeid, group], ["round", nodeid, group], ["finished", exitstatus]; reports, which
get no reply, ["took", nodeid, seconds, timed, others] and ["failed", nodeid, when, message].

`others` is the share of this process's CPUs that other processes and the hypervisor took
while the round ran (`llmbench_disturbance`, the suite's `llmbench.engine.disturbance`
copied beside this file; None where the platform keeps no counters). The coordinator drops
a pair in which either round was disturbed: a reply may then carry "forget" as its last
element, and the worker takes its last timed round back out of its run, so that each side's
saved rounds are the pairs the verdict used.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import socket
import time

import pytest

ADDRESS_ENV = "LLMBENCH_PAIR_ADDRESS"  # the coordinator's Unix socket
SIDE_ENV = "LLMBENCH_PAIR_SIDE"  # "baseline" or "candidate"
SESSION_ENV = "LLMBENCH_PAIR_SESSION"  # one id for both sides of one comparison
DESIGN_ENV = "LLMBENCH_PAIR_DESIGN"  # JSON: the sequential design's alpha and max_pairs
MODULE_NAME = "llmbench_pair_worker"  # the name the coordinator loads this file under
DISTURBANCE_MODULE = "llmbench_disturbance"  # copied beside it: the CPU accounting
FORGET = "forget"  # a reply's last element: drop the last timed round (a disturbed pair)


class Channel:
    """JSON lines over a connected socket, both ways; `receive` can time out."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buffer = b""

    def send(self, message: list) -> None:
        self.sock.sendall((json.dumps(message) + "\n").encode())

    def receive(self, timeout: float | None = None) -> list | None:
        """The next message; None when `timeout` seconds pass first; EOFError when the
        other end has closed."""
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([self.sock], [], [], timeout)
            if not ready:
                return None
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise EOFError("the other end closed the connection")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)

    def close(self) -> None:
        self.sock.close()


_channel: Channel | None = None


def _ask(*message) -> list:
    """Send a request and wait for the reply: this process's turn."""
    _channel.send(list(message))
    try:
        reply = _channel.receive()
    except (EOFError, OSError):
        pytest.exit("llmbench ab went away: this paired run stops", returncode=3)
    return reply


def _tell(*message) -> None:
    _channel.send(list(message))


def _arguments(setup, args, kwargs):
    """What pytest-benchmark's pedantic passes to the target: `setup()`'s result, if any."""
    if setup is not None:
        made = setup()
        if made:
            if args or kwargs:
                raise TypeError("Can't use `args` or `kwargs` if `setup` returns the arguments.")
            return made
    return args, kwargs


def _paired_pedantic(self, target, args=(), kwargs=None, setup=None, teardown=None, rounds=1,
                     warmup_rounds=0, iterations=1):
    """pytest-benchmark's pedantic loop, one round per turn, as many rounds as the
    coordinator grants (the suite's `rounds` is the coordinator's to decide). Warm-up rounds
    take turns too, and are reported untimed."""
    from pytest_benchmark.fixture import PauseInstrumentation

    if self.disabled:
        a, kw = _arguments(setup, args, kwargs or {})
        return target(*a, **kw)
    if iterations != 1:
        raise ValueError("a paired A/B times one call per round: iterations must be 1")
    # Copied beside this file by the coordinator (`DISTURBANCE_MODULE`).
    disturbance = importlib.import_module(DISTURBANCE_MODULE)

    stats, result, warm = None, None, warmup_rounds
    cpus = disturbance.our_cpus()
    while True:
        reply = _ask("round", self.fullname, self.group)
        if reply[-1] == FORGET and stats is not None and stats.stats.data:
            stats.stats.data.pop()  # that round's pair was disturbed: it is not one
        if reply[0] == "stop":
            break
        if reply[0] == "skip":
            pytest.skip(reply[1])
        a, kw = _arguments(setup, args, kwargs or {})
        runner = self._make_runner(target, a, kw)
        before, started = disturbance.read(cpus), time.perf_counter()
        with PauseInstrumentation():
            duration, result = runner(None)
        # The window's own wall time: a case's timer need not be the wall clock
        # (pytest-benchmark's `timer=` may name any clock).
        wall_s = time.perf_counter() - started
        after = disturbance.read(cpus) if before is not None else None
        others = None if after is None else disturbance.window(
            before, after, wall_s, len(cpus)).disturbing_share()
        if teardown is not None:
            teardown(*a, **kw)
        timed = warm == 0
        if timed:
            if stats is None:  # made at the first timed round only (a forgotten one empties
                stats = self._make_stats(1)  # it, and a second would be a second benchmark)
            stats.update(duration)
        else:
            warm -= 1
        _tell("took", self.fullname, duration, timed, others)
    if stats is None:
        pytest.skip("llmbench ab granted this benchmark no timed round")
    return result


def _paired_call(self, function_to_benchmark, *args, **kwargs):
    """`benchmark(fn)` (calibrated mode) becomes one call per turn as well."""
    return _paired_pedantic(self, function_to_benchmark, args, kwargs)


# What of pytest-benchmark's internals llmbench relies on, wherever it does: the paired round
# loop here, the suite's checked rounds (`fixtures/timing.py`: the fixture's `stats`, a
# Metadata whose `stats` holds the rounds; `has_error`), its saved run and interleaved passes
# (`bench.record`, `bench.interleave`: the session pytest-benchmark keeps on the config).
# pyproject.toml pins pytest-benchmark below its next major; tests check every name here.
PYTEST_BENCHMARK_INTERNALS = ("BenchmarkFixture._raw_pedantic", "BenchmarkFixture._raw",
                              "BenchmarkFixture._make_runner", "BenchmarkFixture._make_stats",
                              "BenchmarkFixture.has_error", "BenchmarkFixture.stats",
                              "PauseInstrumentation", "Metadata.update", "Metadata.stats",
                              "Stats.data", "BenchmarkSession.benchmarks",
                              "BenchmarkSession.disabled", "BenchmarkSession.get_machine_info",
                              "config._benchmarksession")


def missing_internals() -> list[str]:
    """The internals above that this pytest-benchmark lacks: [] when all are there."""
    import inspect

    import pytest_benchmark.fixture as fixture
    import pytest_benchmark.plugin as plugin
    import pytest_benchmark.session as session
    import pytest_benchmark.stats as stats

    missing = []
    for name in PYTEST_BENCHMARK_INTERNALS:
        owner, _, attr = name.rpartition(".")
        if owner == "config":  # set on pytest's config by the plugin's own pytest_configure
            found = f"config.{attr} =" in inspect.getsource(plugin.pytest_configure)
        else:
            where = next((getattr(m, owner) for m in (fixture, stats, session)
                          if hasattr(m, owner)), None) if owner else fixture
            # has_error, stats, data, benchmarks and disabled are set in __init__, not on
            # the class.
            found = where is not None and (hasattr(where, attr) or (
                inspect.isclass(where) and f"self.{attr} =" in inspect.getsource(
                    where.__init__)))
        if not found:
            missing.append(name)
    return missing


def pytest_configure(config: pytest.Config) -> None:
    """Connect, wait for the first turn, and take over pytest-benchmark's round loop."""
    global _channel
    from pytest_benchmark.fixture import BenchmarkFixture

    if missing := missing_internals():
        raise pytest.UsageError(
            f"this pytest-benchmark lacks {', '.join(missing)}, which llmbench ab's paired "
            "rounds take over: install pytest-benchmark>=5.1,<6")

    if hasattr(config, "workerinput"):
        raise pytest.UsageError("a paired llmbench ab side cannot run under xdist: drop -n")
    if ADDRESS_ENV not in os.environ:
        raise pytest.UsageError(f"-p {MODULE_NAME} is started by llmbench ab, not by hand")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.environ[ADDRESS_ENV])
    _channel = Channel(sock)
    _ask("hello", os.environ.get(SIDE_ENV, "?"), os.getpid())
    BenchmarkFixture._raw_pedantic = _paired_pedantic
    BenchmarkFixture._raw = _paired_call


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """Run only the benchmarks both sides have, in one order; the coordinator says which."""
    device = config.getoption("device", default=None)
    reply = _ask("collected", [item.nodeid for item in items], device)
    keep = reply[1]
    by_id = {item.nodeid: item for item in items}
    dropped = [item for item in items if item.nodeid not in set(keep)]
    items[:] = [by_id[nodeid] for nodeid in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Ask before a benchmark's fixtures are set up: "go", or "skip" with the reason."""
    if "benchmark" not in getattr(item, "fixturenames", ()):
        return  # not a benchmark: nothing to pair, it runs as it would
    marker = item.get_closest_marker("benchmark")  # where pytest-benchmark reads the group
    reply = _ask("item", item.nodeid, marker.kwargs.get("group") if marker else None)
    if reply[0] == "skip":
        pytest.skip(reply[1])


def pytest_runtest_logreport(report) -> None:
    if report.failed:
        crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
        lines = (report.longreprtext or "").strip().splitlines()
        text = crash.message if crash is not None else lines[-1] if lines else "(no message)"
        _tell("failed", report.nodeid, report.when, text.splitlines()[0] if text else "")


def pytest_benchmark_update_json(config, benchmarks, output_json: dict) -> None:
    """Record in the saved run that its rounds were taken in turn with another run's."""
    output_json["llmbench_pairing"] = {"side": os.environ.get(SIDE_ENV),
                                       "session": os.environ.get(SESSION_ENV),
                                       "order": "ABBA by pair", "unit": "pairs",
                                       "design": json.loads(os.environ.get(DESIGN_ENV, "null"))}


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After the run is saved (the suite's plugin saves first): the turn goes back for good."""
    if _channel is not None:
        _tell("finished", int(exitstatus))
        _channel.close()
