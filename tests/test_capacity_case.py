"""The suite's capacity case (benchmarks/test_server.py::test_server_capacity): a round is a
capacity search, timed by a clock that moves by 1 / capacity, so the saved figure is the
seconds per request at capacity and every gate rule applies to it.

The search logic is the load generator's (tests/test_load_capacity.py); here the rounds
around it, on levels whose outcome the test sets, and the whole case run by pytest against
the tiny model's real in-process server, its decode slowed by sleeping (the injector) so its
capacity is a few requests per second on any machine and the client keeps its schedule."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field

import pytest
from gate_runs import REPO, run_pytest, suite_copy

from fixtures.capacity import WARM_GROWTH, CapacityClock, CapacityRounds
from llmbench.engine.config import SamplingParams
from llmbench.load.config import LoadConfig
from llmbench.load.objectives import MET, MISSED, parse_objectives

NODE = "benchmarks/test_server.py::test_server_capacity"


@dataclass
class _Level:
    """What the search reads of one level."""

    rate: float
    met: bool
    kept: bool = True
    duration_s: float = 1.0

    @property
    def client_kept_schedule(self) -> bool:
        return self.kept

    def summary(self) -> dict:
        return {"objectives": {"verdict": MET if self.met else MISSED}}


@dataclass
class _Server:
    """Levels met up to `capacity` req/s; `behind_from`: the client falls behind there."""

    capacity: float
    behind_from: float = float("inf")
    rates: list[float] = field(default_factory=list)

    def level(self, rate: float) -> _Level:
        self.rates.append(rate)
        return _Level(rate, rate <= self.capacity, rate < self.behind_from)


def _rounds(server: _Server) -> CapacityRounds:
    rounds = CapacityRounds(LoadConfig(num_requests=9, warmup=2),
                            SamplingParams(max_new_tokens=16, ignore_eos=True), None, ["hi"],
                            parse_objectives("e2e=1000", 50), clock=CapacityClock())
    rounds._level = server.level
    return rounds


def test_a_round_moves_the_clock_by_the_seconds_per_request_at_capacity():
    server = _Server(capacity=5.0)
    rounds = _rounds(server)
    start = rounds.clock()
    work = rounds.search_once()
    assert 5.0 / 1.05 <= rounds.last_rate <= 5.0
    assert rounds.clock() - start == pytest.approx(1 / rounds.last_rate)
    assert (work.input_tokens, work.output_tokens) == (None, 16)
    # The next round starts where this one ended, in smaller steps.
    first_levels = len(server.rates)
    server.capacity = 4.0  # the server got slower
    rounds.search_once()
    assert server.rates[first_levels] == pytest.approx(rounds.found[0].met_rate)
    assert len(server.rates) - first_levels < first_levels
    assert 4.0 / 1.05 <= rounds.last_rate <= 4.0
    summary = rounds.summary([work, work])
    assert summary["capacity_rps"] == rounds.found[0].met_rate
    assert summary["capacity_brackets"][0] == [rounds.found[0].met_rate,
                                               rounds.found[0].missed_rate]
    assert WARM_GROWTH < 2


@pytest.mark.parametrize("server, words", [
    (_Server(capacity=0.0), "no capacity to time; objectives p50 e2e 1000 ms must be met"),
    (_Server(capacity=100.0, behind_from=8.0), "the client fell behind its schedule at 8 req/s"),
])
def test_a_round_without_a_capacity_fails_the_case(server, words):
    rounds = _rounds(server)
    start = rounds.clock()
    with pytest.raises(AssertionError, match=words):
        rounds.search_once()
    assert rounds.clock() == start and rounds.last_rate is None


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    copy = suite_copy(tmp_path_factory.mktemp("capacity") / "suite")
    shutil.copy2(REPO / "benchmarks" / "test_server.py", copy / "benchmarks")
    return copy


ARGS = ["--benchmark-only", "--model", "tiny", "--threads", "1", "--rounds", "1",
        "--warmup-rounds", "0", "--passes", "1", "-p", "no:cacheprovider",
        # Each decode step sleeps 10 times its own time: the server holds a few requests
        # per second, so the client keeps its schedule on any machine.
        "-p", "llmbench.bench.inject", "--slow-down", "decode_step=10"]


@pytest.mark.alone  # the client's lag behind its schedule is a timing
def test_the_case_saves_the_seconds_per_request_at_capacity(suite, tmp_path):
    # TTFT is what queueing moves first: once the batch is full, new requests wait.
    proc = run_pytest(suite, *ARGS, f"--baseline-dir={tmp_path}", "--capacity-slo",
                      "ttft=500", "--capacity-percentile", "75", NODE)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (saved,) = tmp_path.glob("*/*.json")
    run = json.loads(saved.read_text())
    (bench,) = run["benchmarks"]
    info, data = bench["extra_info"], bench["stats"]["data"]
    assert bench["group"] == "server-capacity"
    assert bench["options"]["timer"].endswith("capacity_clock")
    assert info["objectives"] == "p75 ttft 500 ms"
    met = [low for low, _ in info["capacity_brackets"]]
    assert len(data) >= 1 and data == pytest.approx([1 / rate for rate in met])
    assert all(high / low <= 1.05 + 1e-9 for low, high in info["capacity_brackets"])
    assert 0.25 < info["capacity_rps"] < 64
    kept = sorted(data)
    assert info["tokens_per_second"] == pytest.approx(16 / kept[len(kept) // 2]) or \
        len(kept) % 2 == 0
    assert info["work"] == {"not_counted": "the server works on its own threads"}


def test_without_objectives_the_case_says_how_to_ask_for_it(suite, tmp_path):
    proc = run_pytest(suite, *ARGS, f"--baseline-dir={tmp_path}", "-rs", NODE)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "pass --capacity-slo ttft=MS,itl=MS" in proc.stdout


def test_bad_objectives_are_one_line_before_anything_runs(suite, tmp_path):
    proc = run_pytest(suite, *ARGS, f"--baseline-dir={tmp_path}", "--capacity-slo", "ttft",
                      NODE)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "--capacity-slo: 'ttft' is not METRIC=MS" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = run_pytest(suite, *ARGS, f"--baseline-dir={tmp_path}", "--capacity-slo", "e2e=9",
                      "--capacity-percentile", "100", NODE)
    assert proc.returncode == 4 and "--capacity-percentile" in proc.stderr, proc.stderr
