"""Open-loop load: seeded arrival schedules, objectives judged with confidence, goodput,
warm-up and cool-down, the client's lag, the capacity search, and the CLI that drives them
against a live tiny server."""

import asyncio
import json
import math
import time

import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from llmbench import cli
from llmbench.engine.config import EngineConfig, SamplingParams
from llmbench.engine.models import load_model
from llmbench.engine.prompts import passage, questions
from llmbench.errors import UserError
from llmbench.load import client
from llmbench.load.capacity import (
    BUDGET,
    CLIENT_BEHIND,
    NARROW,
    NONE_MET,
    Search,
    find_capacity,
)
from llmbench.load.client import _send, run_load
from llmbench.load.config import LoadConfig
from llmbench.load.objectives import (
    MET,
    MISSED,
    NOT_SUSTAINED,
    UNCERTAIN,
    Objectives,
    check,
    parse_objectives,
)
from llmbench.load.result import LoadResult, RequestSample, summary_line
from llmbench.load.schedule import Arrivals
from llmbench.load.workers import send_spread
from llmbench.load.workload import PlannedRequest, Workload, parse_lengths
from llmbench.serve.app import ServerSettings, create_app, running_server

# -- the schedule ------------------------------------------------------------------------


def test_a_seeded_schedule_repeats_and_another_seed_differs():
    first = Arrivals(rate=4.0, seed=7).offsets(50)
    assert np.array_equal(first, Arrivals(rate=4.0, seed=7).offsets(50))
    assert not np.array_equal(first, Arrivals(rate=4.0, seed=8).offsets(50))
    assert first[0] == 0.0 and np.all(np.diff(first) >= 0)


def test_a_level_offers_exactly_its_rate_whatever_the_draw():
    for seed in range(5):
        offsets = Arrivals(rate=8.0, seed=seed).offsets(48)
        assert offsets[-1] == pytest.approx(47 / 8.0)


def test_constant_arrivals_are_evenly_spaced():
    assert Arrivals(rate=5.0, arrival="constant").offsets(4) == pytest.approx(
        [0.0, 0.2, 0.4, 0.6])


@pytest.mark.parametrize(("arrival", "burstiness", "cv"),
                         [("poisson", 1.0, 1.0), ("gamma", 0.25, 2.0), ("gamma", 4.0, 0.5)])
def test_arrivals_keep_the_rate_and_burstiness_sets_the_spread(arrival, burstiness, cv):
    # Gamma gaps with shape k have a coefficient of variation of 1/sqrt(k); Poisson is k=1.
    gaps = np.diff(Arrivals(rate=10.0, arrival=arrival, burstiness=burstiness,
                            seed=3).offsets(40_001))
    assert gaps.mean() == pytest.approx(0.1, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)


def test_a_bad_schedule_is_refused_in_one_line():
    with pytest.raises(UserError, match="--rate must be a positive"):
        Arrivals(rate=0)
    with pytest.raises(UserError, match="add --arrival gamma"):
        Arrivals(rate=1, burstiness=0.5)
    with pytest.raises(UserError, match="unknown arrival"):
        Arrivals(rate=1, arrival="bursty")


# -- objectives ---------------------------------------------------------------------------


def test_objectives_parse_and_bad_ones_say_what_is_wrong():
    objectives = parse_objectives("ttft=500, tpot=40,e2e=4000", 90)
    assert objectives.limits_ms == {"ttft": 500.0, "itl": 40.0, "e2e": 4000.0}
    assert objectives.describe() == "p90 ttft 500 ms, itl 40 ms, e2e 4000 ms"
    for bad, message in [("ttft", "METRIC=MS"), ("speed=3", "METRIC=MS"),
                         ("ttft=-1", "positive"), ("ttft=abc", "positive"),
                         ("ttft=1,ttft=2", "twice"), ("", "at least one")]:
        with pytest.raises(UserError, match=message):
            parse_objectives(bad)
    with pytest.raises(UserError, match="between 0 and 100"):
        Objectives({"ttft": 1.0}, percentile=100)


def test_the_fewest_requests_that_can_claim_a_percentile_follow_mlperf():
    # LoadGen's early stopping: 459 queries, none over the limit, for a p99 at 99%.
    assert Objectives({"ttft": 1.0}, 99).minimum_requests == 459
    assert Objectives({"ttft": 1.0}, 90).minimum_requests == 44
    assert Objectives({"ttft": 1.0}, 50).minimum_requests == 7


def test_an_objective_is_met_missed_or_uncertain_by_its_interval():
    fast = [0.100] * 459
    assert check("ttft", 200, fast, 99).verdict == MET
    too_few = check("ttft", 200, fast[:458], 99)
    assert too_few.verdict == UNCERTAIN and too_few.high_ms is None
    assert check("ttft", 200, [0.300] * 100, 99).verdict == MISSED
    # Ten failures in 459 put the true p99 beyond reach of the limit: not met.
    with_failures = check("ttft", 200, fast[:449] + [math.inf] * 10, 99)
    assert with_failures.verdict in (MISSED, UNCERTAIN)
    # Half the requests slow: the p50 cannot be called either way at this limit.
    split = check("e2e", 1000, [0.5] * 50 + [2.0] * 50, 50)
    assert split.verdict == UNCERTAIN and split.low_ms == 500 and split.high_ms == 2000


# -- a level's figures ---------------------------------------------------------------------


def _sample(index: int, ttft: float, latency: float, tokens: int = 5, sent: float = 0.0,
            scheduled: float | None = 0.0, measured: bool = True) -> RequestSample:
    return RequestSample(latency_s=latency, ttft_s=ttft, itl_s=(0.01,) * (tokens - 1),
                         output_tokens=tokens, counted_by="server", tokenizer_tokens=tokens,
                         server_output_tokens=tokens, index=index, scheduled_s=scheduled,
                         sent_s=sent, measured=measured)


def _open_level(samples, objectives=None, max_lag_s=0.010, lag_percentile=99.0) -> LoadResult:
    config = LoadConfig(url="http://127.0.0.1:1", num_requests=len(samples),
                        arrivals=Arrivals(rate=10.0), max_lag_s=max_lag_s,
                        lag_percentile=lag_percentile,
                        warmup=sum(1 for s in samples[:1] if not s.measured))
    return LoadResult(config, SamplingParams(max_new_tokens=5), 9.0, tuple(samples),
                      objectives=objectives)


def test_warmup_and_cooldown_are_sent_but_left_out_of_every_figure():
    samples = ([_sample(0, 5.0, 9.0, measured=False)]
               + [_sample(i, 0.1, 0.5, sent=float(i), scheduled=float(i)) for i in range(1, 5)]
               + [_sample(5, 5.0, 9.0, sent=5.0, scheduled=5.0, measured=False)])
    summary = _open_level(samples).summary()
    assert (summary["num_requests"], summary["num_ok"], summary["num_left_out"]) == (4, 4, 2)
    assert summary["ttft_ms"]["p99"] == pytest.approx(100.0)
    # The throughput is over the measured requests' own window: sent at 1 s, last end 4.5 s.
    assert summary["window_s"] == pytest.approx(3.5)
    assert summary["request_throughput"] == pytest.approx(4 / 3.5)
    assert summary["offered_rate"] == pytest.approx(1.0)
    assert summary_line(summary).startswith(
        "rate 10 req/s (poisson): 4 ok, 0 errors, 2 left out (warm-up and cool-down)")


def test_goodput_counts_requests_within_every_objective():
    objectives = Objectives({"ttft": 200.0, "e2e": 1000.0}, percentile=50)
    samples = ([_sample(i, 0.1, 0.5, sent=i * 0.1, scheduled=i * 0.1) for i in range(38)]
               + [_sample(38, 0.1, 3.0, sent=3.8, scheduled=3.8),  # e2e over
                  _sample(39, 0.5, 0.9, sent=3.9, scheduled=3.9)])  # ttft over
    result = _open_level(samples, objectives)
    summary = result.summary()["objectives"]
    assert summary["num_within"] == 38 and summary["within_share"] == pytest.approx(0.95)
    assert summary["within_share_ci"][0] < 0.95 < summary["within_share_ci"][1]
    assert summary["goodput_request_rate"] == pytest.approx(38 / result.window_s)
    assert summary["verdict"] == MET
    line = summary_line(result.summary())
    assert "objectives MET: goodput" in line and "38 of 40 within every objective" in line
    assert "ttft p50 100 ms [100, 100] vs 200: met" in line
    # Ten requests cannot bound their p50 tightly enough to call it: the interval says so.
    few = _open_level(samples[:8] + samples[38:], objectives).summary()["objectives"]
    assert few["verdict"] == UNCERTAIN


def test_a_client_behind_its_schedule_is_named_not_blamed_on_the_server():
    late = [_sample(i, 0.1, 0.5, sent=i * 0.1 + 0.05, scheduled=i * 0.1) for i in range(5)]
    result = _open_level(late)
    assert not result.client_kept_schedule
    assert "CLIENT BEHIND SCHEDULE" in summary_line(result.summary())
    assert result.summary()["lag_ms"]["p50"] == pytest.approx(50.0)
    on_time = _open_level([_sample(i, 0.1, 0.5, sent=i * 0.1 + 1e-4, scheduled=i * 0.1)
                           for i in range(5)])
    assert on_time.client_kept_schedule
    assert "client on schedule: lag p50 0.10 ms" in summary_line(on_time.summary())


def test_a_late_warm_up_does_not_put_the_client_behind():
    """The first requests wait for the client's connections; each request is sent at its
    own offset, so their delay moves no measured one, and only the measured ones judge."""
    warmup = [_sample(i, 0.1, 0.5, sent=i * 0.1 + 0.08, scheduled=i * 0.1, measured=False)
              for i in range(2)]
    measured = [_sample(i, 0.1, 0.5, sent=i * 0.1 + 1e-4, scheduled=i * 0.1)
                for i in range(2, 8)]
    kept = _open_level(warmup + measured)
    assert kept.client_kept_schedule and kept.summary()["lag_ms"]["max"] < 1.0
    one_late = measured[:-1] + [_sample(7, 0.1, 0.5, sent=0.78, scheduled=0.7)]
    assert not _open_level(warmup + one_late).client_kept_schedule


def test_a_client_descheduled_once_keeps_its_rate_at_a_lower_lag_percentile():
    """A stall sends the requests due during it late, then the client catches up: judged at
    p90 the level keeps its rate; a client late for most requests is behind at any
    percentile, and the line names the percentile it was judged at."""
    on_time = [_sample(i, 0.1, 0.5, sent=i * 0.1 + 1e-4, scheduled=i * 0.1) for i in range(40)]
    stalled = on_time[:20] + [_sample(i, 0.1, 0.5, sent=2.08, scheduled=i * 0.1)
                              for i in (20,)] + on_time[21:]
    assert not _open_level(stalled).client_kept_schedule
    kept = _open_level(stalled, lag_percentile=90.0)
    assert kept.client_kept_schedule
    assert kept.summary()["lag_ms"]["percentile"] == 90.0
    assert kept.summary()["lag_ms"]["judged"] < 1.0 < kept.summary()["lag_ms"]["p99"]
    behind = _open_level([_sample(i, 0.1, 0.5, sent=i * 0.1 + 0.03, scheduled=i * 0.1)
                          for i in range(40)], lag_percentile=90.0)
    assert not behind.client_kept_schedule
    assert "30.0 ms late (p90; max 30.0 ms)" in summary_line(behind.summary())


def test_a_level_saved_before_the_lag_percentile_reads_as_judged_at_p99():
    summary = _open_level([_sample(i, 0.1, 0.5, sent=i * 0.1 + 0.05, scheduled=i * 0.1)
                           for i in range(5)]).summary()
    summary["lag_ms"] = {k: summary["lag_ms"][k] for k in ("p50", "p99", "max")}
    assert "50.0 ms late (p99; max 50.0 ms)" in summary_line(summary)


def test_a_queue_that_grows_through_the_level_is_not_sustained():
    objectives = Objectives({"ttft": 5000.0}, percentile=50)
    # Each request waits 50 ms longer than the one before: a server behind its arrivals.
    growing = [_sample(i, 0.1 + 0.05 * i, 0.2 + 0.05 * i, sent=i * 0.1, scheduled=i * 0.1)
               for i in range(40)]
    result = _open_level(growing, objectives)
    assert result.queue.growing and result.queue.ratio > 1.5
    assert result.summary()["objectives"]["verdict"] == NOT_SUSTAINED
    assert "QUEUE GROWING" in summary_line(result.summary())
    # A steady server whose TTFT wobbles: no trend, no growth.
    rng = np.random.default_rng(1)
    steady = [_sample(i, 0.1 + 0.02 * rng.random(), 0.3, sent=i * 0.1, scheduled=i * 0.1)
              for i in range(40)]
    assert not _open_level(steady, objectives).queue.growing
    assert _open_level(steady, objectives).summary()["objectives"]["verdict"] == MET
    # A small trend is not growth, however significant.
    creeping = [_sample(i, 0.1 + 0.001 * i, 0.3, sent=i * 0.1, scheduled=i * 0.1)
                for i in range(40)]
    assert not _open_level(creeping, objectives).queue.growing


# -- the capacity search -------------------------------------------------------------------


class FakeServer:
    """A server that holds its objectives up to `capacity` requests per second; each level
    advances a fake clock by requests / rate, and a second to drain."""

    def __init__(self, capacity: float, lag_from: float = math.inf, latency_at=None):
        self.capacity, self.lag_from, self.now, self.rates = capacity, lag_from, 0.0, []
        self.objectives = Objectives({"e2e": 1000.0}, percentile=90)
        self.latency_at = latency_at or (lambda rate: 0.2 if rate <= self.capacity else 5.0)

    def run(self, rate: float) -> LoadResult:
        self.rates.append(rate)
        n = self.objectives.minimum_requests
        self.now += n / rate + 1.0
        latency = self.latency_at(rate)
        lag = 0.0 if rate < self.lag_from else 0.5
        samples = [_sample(i, 0.05, latency, sent=i / rate + lag, scheduled=i / rate)
                   for i in range(n)]
        config = LoadConfig(url="http://127.0.0.1:1", num_requests=n,
                            arrivals=Arrivals(rate=rate))
        return LoadResult(config, SamplingParams(max_new_tokens=5), n / rate + 1.0,
                          tuple(samples), objectives=self.objectives)


def _search(server: FakeServer, **search):
    return find_capacity(server.run, Search(**search), lambda rate: 44 / rate,
                         clock=lambda: server.now)


def test_the_search_doubles_then_bisects_to_a_bracket_around_the_capacity():
    server = FakeServer(capacity=13.0)
    answer = _search(server, start_rate=1.0, tolerance=0.1)
    assert server.rates[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert answer.met_rate <= 13.0 < answer.missed_rate
    assert answer.missed_rate / answer.met_rate <= 1.1
    assert answer.stopped == NARROW
    assert "capacity: " in answer.line() and "bracket narrow enough" in answer.line()


def test_the_search_halves_from_a_start_above_the_capacity():
    server = FakeServer(capacity=3.0)
    answer = _search(server, start_rate=50.0)
    assert server.rates[:5] == [50.0, 25.0, 12.5, 6.25, 3.125]
    assert answer.met_rate <= 3.0 < answer.missed_rate


def test_the_search_says_when_nothing_was_met_or_time_ran_out():
    nothing = _search(FakeServer(capacity=0.001), start_rate=1.0, budget_s=1e6)
    assert nothing.met_rate is None and nothing.stopped == NONE_MET
    assert nothing.line().startswith("capacity: NONE FOUND (no rate met")
    server = FakeServer(capacity=1e9)
    short = _search(server, start_rate=1.0, budget_s=100.0)
    assert short.stopped == BUDGET and short.missed_rate is None
    assert server.now <= 100.0


def test_the_search_stops_where_the_client_falls_behind():
    server = FakeServer(capacity=1e9, lag_from=8.0)
    answer = _search(server, start_rate=1.0)
    assert answer.stopped == CLIENT_BEHIND and answer.met_rate == 4.0
    assert server.rates == [1.0, 2.0, 4.0, 8.0]


def test_a_level_missed_although_the_client_fell_behind_is_missed():
    # The server missed even the lower rate the late client offered: it misses this one.
    server = FakeServer(capacity=5.0, lag_from=8.0)
    answer = _search(server, start_rate=1.0, tolerance=0.1)
    assert answer.behind_rate is None and answer.stopped == NARROW
    assert answer.met_rate <= 5.0 < answer.missed_rate


def test_one_rate_for_the_capacity_is_the_middle_of_its_bracket():
    answer = _search(FakeServer(capacity=13.0), start_rate=1.0, tolerance=0.1)
    assert answer.estimate_rate() == pytest.approx(
        math.sqrt(answer.met_rate * answer.missed_rate))
    assert answer.met_rate < answer.estimate_rate() < answer.missed_rate
    # Nothing above the highest met was missed: that rate is all the search can claim.
    behind = _search(FakeServer(capacity=1e9, lag_from=8.0), start_rate=1.0)
    assert behind.estimate_rate() == behind.met_rate == 4.0
    assert _search(FakeServer(capacity=0.001), start_rate=1.0,
                   budget_s=1e6).estimate_rate() is None


def test_the_capacity_is_where_the_latency_reaches_the_limit_whatever_rates_were_tried():
    # Latency grows as rate^2: it reaches the 1000 ms limit at 10 req/s exactly. Searches
    # from different starts bracket it differently; the estimate does not follow the grid.
    def server():
        return FakeServer(capacity=math.inf, latency_at=lambda rate: (rate / 10.0) ** 2)

    for start in (0.7, 1.0, 1.3, 3.1):
        answer = _search(server(), start_rate=start, tolerance=0.3)
        assert answer.met_rate < 10.0 < answer.missed_rate
        assert answer.estimate_rate() == pytest.approx(10.0, rel=1e-6)


# -- against a live server -------------------------------------------------------------


@pytest.fixture(scope="module")
def lm():
    return load_model(EngineConfig(model="tiny", device="cpu"))


@pytest.fixture(scope="module")
def live(lm):
    with running_server(create_app(lm, ServerSettings(max_new_tokens_cap=64))) as url:
        yield url


def test_the_same_seed_sends_the_same_requests_at_the_same_offsets(live, lm):
    config = LoadConfig(url=live, num_requests=10, arrivals=Arrivals(rate=20.0, seed=5),
                        warmup=2, cooldown=1)
    params = SamplingParams(max_new_tokens=3, ignore_eos=True)
    prompts = ["Hi", "What is a cache?", "Name a color."]
    runs = [run_load(config, params, lm.tokenizer, prompts) for _ in range(2)]
    expected = Arrivals(rate=20.0, seed=5).offsets(10)
    for result in runs:
        assert [s.index for s in result.samples] == list(range(10))
        assert [s.scheduled_s for s in result.samples] == pytest.approx(expected)
        assert [s.measured for s in result.samples] == [False] * 2 + [True] * 7 + [False]
        # Sent no earlier than due (the event loop's clock may round by a hair).
        assert all(s.lag_s > -1e-3 for s in result.samples)
        assert result.num_errors == 0 and result.summary()["lag_ms"] is not None
    assert [s.input_tokens for s in runs[0].samples] == [s.input_tokens
                                                         for s in runs[1].samples]


def _load(argv: list[str]) -> int:
    # --max-lag: these check what the command does, not how well a busy test machine keeps
    # a schedule (the lag's own rule is tested above).
    return cli.main(["load", "--model", "tiny", "--max-new-tokens", "3", "--fixed-length",
                     "--max-lag", "1000", *argv])


def test_cli_open_loop_writes_records_and_a_plot(live, tmp_path, capsys):
    out, records, plot = tmp_path / "load.json", tmp_path / "r.jsonl", tmp_path / "p.png"
    code = _load(["--url", live, "--rate", "10,20", "--requests", "6", "--warmup", "1",
                  "--output", str(out), "--records", str(records), "--plot", str(plot)])
    assert code == 0
    err = capsys.readouterr().err
    assert "rate 10 req/s (poisson): 5 ok, 0 errors, 1 left out" in err
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(lines) == 12 and {line["level"] for line in lines} == {0, 1}
    assert all(line["scheduled_s"] is not None and "ttft_s" in line for line in lines)
    assert plot.read_bytes()[:4] == b"\x89PNG"
    document = json.loads(out.read_text())
    assert [lv["config"]["arrivals"]["rate"] for lv in document["levels"]] == [10.0, 20.0]
    # Nothing written is ever overwritten.
    assert _load(["--url", live, "--rate", "10", "--requests", "2",
                  "--records", str(records)]) == 2
    assert "r.jsonl exists" in capsys.readouterr().err


def test_cli_objectives_decide_the_exit_code(live, capsys):
    assert _load(["--url", live, "--rate", "20", "--slo", "e2e=60000",
                  "--slo-percentile", "50"]) == 0
    captured = capsys.readouterr()
    assert "objectives MET" in captured.err
    # The default request count is the fewest that can claim the percentile: 7 for a p50.
    assert json.loads(captured.out)["levels"][0]["summary"]["num_requests"] == 7
    assert _load(["--url", live, "--rate", "20", "--slo", "ttft=0.001",
                  "--slo-percentile", "50"]) == 1
    err = capsys.readouterr().err
    assert "objectives MISSED" in err
    assert "llmbench load: objectives not met at rate 20 req/s (poisson)" in err


def test_cli_finds_a_capacity_within_its_budget(live, capsys):
    code = _load(["--url", live, "--find-capacity", "--slo", "e2e=60000",
                  "--slo-percentile", "50", "--rate", "4", "--capacity-budget", "3s"])
    assert code == 0
    captured = capsys.readouterr()
    assert "capacity: " in captured.err
    capacity = json.loads(captured.out)["capacity"]
    assert capacity["capacity_rate"] >= 4.0 and capacity["rates_tried"][0] == 4.0
    assert capacity["line"] in captured.err  # a saved run's report can say it again


@pytest.mark.parametrize(("argv", "message"), [
    (["--find-capacity"], "add --slo"),
    (["--arrival", "gamma"], "add --rate"),
    (["--rate", "1", "--burstiness", "0.5"], "add --arrival gamma"),
    (["--rate", "1", "--slo", "ttft=100", "--requests", "100"],
     "needs at least 459 measured requests"),
    (["--rate", "1", "--requests", "4", "--warmup", "2", "--cooldown", "2"],
     "leave no request of 4 to measure"),
    (["--find-capacity", "--slo", "ttft=100", "--rate", "1,2"], "one starting rate"),
    (["--rate", "1", "--plot", "load.txt"], "name a .png, .svg or .pdf file"),
    (["--rate", "1", "--records", "/nonexistent/r.jsonl"], "does not exist"),
    (["--rate", "1", "--input-tokens", "uniform:1:inf"], "takes N"),
    (["--workers", "2"], "--workers spreads an open-loop schedule"),
    (["--rate", "1", "--lag-percentile", "101"], "--lag-percentile must be above 0"),
])
def test_cli_bad_load_flags_are_one_line_and_exit_2(argv, message, capsys):
    assert _load(["--url", "http://127.0.0.1:9", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_cli_rate_and_concurrency_do_not_mix(capsys):
    with pytest.raises(SystemExit) as exited:
        _load(["--rate", "1", "--concurrency", "2"])
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


# -- workloads -------------------------------------------------------------------------


def test_lengths_parse_draw_and_refuse(tmp_path):
    rng = np.random.default_rng(0)
    assert parse_lengths("64", "--input-tokens").draw(rng, 3) == [64, 64, 64]
    uniform = parse_lengths("uniform:10:12", "--input-tokens").draw(rng, 300)
    assert set(uniform) == {10, 11, 12}
    normal = parse_lengths("normal:100:20", "--input-tokens").draw(rng, 4000)
    assert np.mean(normal) == pytest.approx(100, abs=2) and min(normal) >= 1
    trace = tmp_path / "lengths.txt"
    trace.write_text("5\n\n7\n")
    assert set(parse_lengths(f"file:{trace}", "--output-tokens").draw(rng, 100)) == {5, 7}
    trace.write_text("5\nseven\n")
    for bad, message in [("0", "takes N"), ("uniform:9:3", "takes N"), ("normal:5", "takes N"),
                         ("many", "takes N"), (f"file:{trace}", "line 2: 'seven'"),
                         (f"file:{tmp_path / 'none'}", "cannot read")]:
        with pytest.raises(UserError, match=message):
            parse_lengths(bad, "--input-tokens")


def test_a_workload_plans_lengths_and_shared_prefixes(lm):
    tokenizer = lm.tokenizer
    workload = Workload(input_tokens=parse_lengths("uniform:20:40", "-"),
                        output_tokens=parse_lengths("uniform:2:9", "-"), prefix_tokens=16,
                        prefix_groups=2, seed=4)
    plan = workload.plan(12, tokenizer, passage(), questions())
    assert plan == workload.plan(12, tokenizer, passage(), questions())  # seeded
    assert plan != Workload(**{**workload.__dict__, "seed": 5}).plan(12, tokenizer, passage(),
                                                                     questions())
    assert all(2 <= r.max_new_tokens <= 9 for r in plan)
    prefixes = [r.prompt.split("\n\n")[0] for r in plan]
    assert prefixes[0::2] == [prefixes[0]] * 6 and prefixes[1::2] == [prefixes[1]] * 6
    assert prefixes[0] != prefixes[1]
    bodies = [len(tokenizer(r.prompt.split("\n\n", 1)[1], add_special_tokens=False)
                  ["input_ids"]) for r in plan]
    assert all(16 <= n <= 44 for n in bodies)  # 20-40, give or take a token at a seam
    with pytest.raises(UserError, match="add --shared-prefix"):
        Workload(prefix_groups=3)


def test_each_request_asks_its_own_token_limit(live, lm):
    plan = [PlannedRequest("Hi", 2), PlannedRequest("Name a color.", 5)]
    config = LoadConfig(url=live, num_requests=4, concurrency=2)
    result = run_load(config, SamplingParams(max_new_tokens=50, ignore_eos=True),
                      lm.tokenizer, plan)
    assert result.num_errors == 0
    assert [(s.max_new_tokens, s.output_tokens) for s in result.samples] == [
        (2, 2), (5, 5), (2, 2), (5, 5)]


def test_cli_sends_the_workload_it_was_asked_for(live, capsys, tmp_path):
    records = tmp_path / "r.jsonl"
    assert _load(["--url", live, "--concurrency", "2", "--requests", "6", "--input-tokens",
                  "uniform:8:24", "--output-tokens", "uniform:1:4", "--shared-prefix", "8",
                  "--records", str(records)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["workload"] == ("input tokens uniform:8:24, output tokens uniform:1:4, a "
                                    "8-token prefix shared in 1 group(s)")
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert all(line["output_tokens"] == line["max_new_tokens"] <= 4 for line in lines)


# -- more than one client process ----------------------------------------------------------


def test_workers_share_one_schedule_from_one_moment(live, lm):
    """Two spawned processes send the even and the odd requests of one schedule; the
    coordinator gets every request back, at its own offset, counted by its tokenizer."""
    arrivals = Arrivals(rate=20.0, seed=2)
    config = LoadConfig(url=live, num_requests=10, arrivals=arrivals, workers=2)
    done = []
    result = run_load(config, SamplingParams(max_new_tokens=3, ignore_eos=True),
                      lm.tokenizer, ["Hi", "Name a color."], progress=lambda: done.append(1))
    assert len(done) == 10 and result.num_errors == 0
    assert [s.index for s in result.samples] == list(range(10))
    assert [s.scheduled_s for s in result.samples] == pytest.approx(arrivals.offsets(10))
    assert all(s.lag_s > -1e-3 for s in result.samples)
    assert all(s.output_tokens == 3 for s in result.samples)


def test_one_worker_of_its_own_sends_from_a_spawned_process(live, lm, monkeypatch):
    """`own_process` takes the spawned path with a single worker (a caller that serves in
    this process keeps its interpreter lock away from the sender) and loses nothing."""
    spread = []
    monkeypatch.setattr(client, "send_spread",
                        lambda *args: spread.append(args[1].workers) or send_spread(*args))
    arrivals = Arrivals(rate=20.0, seed=3)
    config = LoadConfig(url=live, num_requests=6, arrivals=arrivals, own_process=True)
    result = run_load(config, SamplingParams(max_new_tokens=2, ignore_eos=True),
                      lm.tokenizer, ["Hi"])
    assert spread == [1] and result.num_errors == 0
    assert [s.scheduled_s for s in result.samples] == pytest.approx(arrivals.offsets(6))


def test_workers_need_an_open_loop():
    with pytest.raises(UserError, match="--workers spreads an open-loop schedule"):
        LoadConfig(workers=2)
    with pytest.raises(UserError, match="its own process is an open-loop schedule"):
        LoadConfig(own_process=True)


def test_a_worker_that_finished_first_is_not_taken_for_a_dead_one(live, lm):
    # One request a second: worker 0's last ends about a second before worker 1's.
    config = LoadConfig(url=live, num_requests=4, workers=2,
                        arrivals=Arrivals(rate=1.0, arrival="constant"))
    result = run_load(config, SamplingParams(max_new_tokens=2, ignore_eos=True),
                      lm.tokenizer, ["Hi"])
    assert result.num_errors == 0 and [s.index for s in result.samples] == [0, 1, 2, 3]


def test_a_sender_waits_for_the_moment_it_shares(live):
    """Times count from the shared moment, not from when the process got there: nothing is
    sent before it, and each request no earlier than its offset from it."""
    config = LoadConfig(url=live, num_requests=3,
                        arrivals=Arrivals(rate=10.0, arrival="constant"))
    began = time.monotonic()
    sent = asyncio.run(_send(config, SamplingParams(max_new_tokens=1), ["Hi"],
                             origin=began + 0.3))
    assert time.monotonic() - began >= 0.3 + 0.2
    assert all(sent_s >= scheduled - 1e-3
               for scheduled, sent_s, _, _ in sent.outcomes.values())


def _stalling_app() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(body: dict):
        async def events():
            await asyncio.sleep(30)
            yield "data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def test_duration_cuts_off_what_runs_and_the_objectives_are_fair_to_it(lm):
    with running_server(_stalling_app()) as url:
        config = LoadConfig(url=url, api="openai", num_requests=20, duration_s=0.5,
                            arrivals=Arrivals(rate=10.0, arrival="constant"))
        objectives = Objectives({"e2e": 60_000.0, "ttft": 100.0}, percentile=50)
        result = run_load(config, SamplingParams(max_new_tokens=2), lm.tokenizer, ["Hi"],
                          objectives=objectives)
    # Requests 0-4 or so were sent and cut off; the rest were never due.
    assert 1 <= result.num_cut_off < 20 and not result.samples
    assert len(result.cut_off_s) == result.num_cut_off
    assert result.summary()["errors_by_reason"] == {"cut off": result.num_cut_off}
    checks = {c.metric: c for c in result.objective_checks()}
    # None had run a minute: the e2e objective cannot count them as over it.
    assert checks["e2e"].num_requests == 0 and checks["e2e"].verdict == UNCERTAIN
    # Those that had run past 100 ms count as over the TTFT limit.
    assert checks["ttft"].num_requests == sum(1 for ran in result.cut_off_s if ran > 0.1)


def test_a_closed_loop_warmup_takes_its_time_with_it():
    config = LoadConfig(url="http://127.0.0.1:1", concurrency=1, num_requests=3, warmup=1)
    samples = (_sample(0, 0.1, 5.0, sent=0.0, scheduled=None, measured=False),
               _sample(1, 0.1, 1.0, sent=5.0, scheduled=None),
               _sample(2, 0.1, 1.0, sent=6.0, scheduled=None))
    result = LoadResult(config, SamplingParams(max_new_tokens=5), 7.0, samples)
    assert result.window_s == pytest.approx(2.0) and result.request_throughput == 1.0


def test_a_search_stopped_by_the_client_claims_only_at_least():
    answer = _search(FakeServer(capacity=1e9, lag_from=8.0), start_rate=1.0)
    assert answer.behind_rate == 8.0
    assert answer.line().startswith("capacity: at least 4 req/s within the objectives (the "
                                    "client fell behind its schedule at 8 req/s")
