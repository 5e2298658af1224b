"""The server's capacity: the highest Poisson arrival rate it holds within an objective.

Each round is a whole search (`llmbench.load.capacity`, as `llmbench load --find-capacity`
runs it): open-loop levels of one seeded schedule shape, doubling from the rate one request
alone sustains, then bisecting until the bracket is within the tolerance. The round's figure,
recorded as its time through a `FigureClock`, is seconds per request at the capacity
estimated inside the bracket (`Capacity.estimate_rate`), so a lower capacity is a slower
round and every rule the gate applies to time applies to it, a paired `llmbench ab`
included. `extra_info` keeps the capacity in requests per second.

The objective is relative: the median request's time to first token within `capacity_slo`
times that of one request alone, measured by each run (each side of an A/B) before its
rounds, and a queue that did not grow through the level (`queueing`). A suite runs on models
and machines of every speed, where no one limit in milliseconds fits; relative to the
server's own unloaded latency, the capacity says how much concurrent traffic the server
turns into throughput, and a slower engine lowers it as it lowers everything. TTFT rather
than the whole latency: below capacity a request's whole latency grows gently with the
rate (its decode steps share a larger batch), so a limit on it sits on a slope and the
capacity found wanders with the noise; the time to first token stays flat until the batch
is full and requests queue, then jumps, and a limit on it finds that knee. The median rather
than a tail keeps each level short (MLPerf's criterion lets a few requests claim a median,
hundreds a p99: `Objectives.minimum_requests`): a user who needs their own limit at p99
has `llmbench load --find-capacity --slo`.

A level lasts about the same time at every rate (`LEVEL_S` of measured arrivals, never
fewer than the profile's `capacity_requests` requests), with about a second's arrivals left out at
each end: a level of a fixed request count would last a second at a high rate, too short for
a queue to show that it grows.

The search runs in this process, but each level's requests go out from one spawned client
process (`LoadConfig.own_process`): the in-process server's event loop and decoding thread
hold this interpreter's lock in turns, and a client sharing it sent late at rates the
server held and saw its own delays as a growing queue. A client that still falls behind
its schedule ends the search at the rate it last kept, which the round records (`stopped`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import pytest

from fixtures.server import SERVER_WORK
from fixtures.timing import FigureClock, Work
from llmbench.engine.config import SamplingParams
from llmbench.engine.openmp import release_thread_pool
from llmbench.engine.prompts import questions
from llmbench.load.capacity import Search, find_capacity
from llmbench.load.client import run_load
from llmbench.load.objectives import Objectives
from llmbench.load.schedule import Arrivals
from llmbench.runs.model import ROUND_WALL_S

CLOCK = FigureClock("test_server_capacity")
ALONE_REQUESTS = 5  # one request at a time, before the rounds: the objective's unit
LEVEL_S = 8.0  # of measured arrivals in a level
EDGE_S = 1.0  # of arrivals sent but not measured at each end of a level (filling, draining)
LEFT_OUT = 1  # request left out at each end at least
TOLERANCE = 0.10  # the search stops when its bracket is this narrow
SEARCH_BUDGET_S = 300.0  # one round's search at most
# How late the client may send and still offer a level its rate: `LAG_PERCENTILE` of the
# measured requests within `LAG_OF_GAP` mean gaps between arrivals (never less than the
# client's own default). On a small machine whose server's threads hold every CPU, the
# client process is descheduled for tens of milliseconds once or twice a level, sends the
# few requests due meanwhile late and catches up: the level's rate is still offered, but at
# a level's hundred-odd requests the p99 is one of those few, and judged at p99 such stalls
# ended whole searches at the rate below. A client that cannot keep up sends most of its
# requests late, and its p90 shows it.
LAG_OF_GAP = 1.0
LAG_PERCENTILE = 90.0
# A round is a whole search, minutes on a CPU: the profile's rounds, up to this many.
MOST_ROUNDS = 5


def _alone(config, params, tokenizer, prompts, num_tokens: int) -> tuple[float, float]:
    """The median time to first token and the median latency, in seconds, of a request sent
    alone, every one of them served in full."""
    release_thread_pool()  # this thread's pool would slow the in-process server's
    result = run_load(config, params, tokenizer, prompts)
    assert result.num_errors == 0, result.summary()["errors"]
    assert [s.output_tokens for s in result.ok] == [num_tokens] * ALONE_REQUESTS
    return (statistics.median(s.ttft_s for s in result.ok),
            statistics.median(s.latency_s for s in result.ok))


def _level_requests(rate: float, level_s: float, fewest: int) -> tuple[int, int]:
    """(measured, left out at each end) for a level at `rate`: `level_s` of arrivals, at
    least `fewest` requests, and about `EDGE_S` of arrivals at each end."""
    return max(fewest, math.ceil(rate * level_s)), max(LEFT_OUT, math.ceil(rate * EDGE_S))


def _levels(found) -> list[list]:
    """Each level a round's search ran, in order: [rate, verdict, the objective's percentile
    and its upper bound in ms, whether the queue grew, the client's lag behind its schedule
    in ms at `LAG_PERCENTILE` and whether that kept the schedule]. What the search decided
    on, so a round's figure can be traced to the levels that made it."""
    out = []
    for level in found.levels:
        summary = level.summary()
        objectives = summary["objectives"] or {}
        check = (objectives.get("checks") or [{}])[0]
        out.append([round(level.config.arrivals.rate, 4), objectives.get("verdict"),
                    *(None if check.get(k) is None else round(check[k], 1)
                      for k in ("value_ms", "high_ms")),
                    bool((summary["queue"] or {}).get("growing")),
                    None if summary["lag_ms"] is None else round(summary["lag_ms"]["judged"], 1),
                    level.client_kept_schedule])
    return out


def _summary(rounds: list[Work]) -> dict:
    found = [work.record for work in rounds]
    return {"capacity_rps": statistics.median(c.estimate_rate() for c in found),
            "capacity_rps_rounds": [round(c.estimate_rate(), 4) for c in found],
            "stopped": sorted({c.stopped for c in found}),
            "levels_per_round": statistics.median(len(c.levels) for c in found),
            "levels": [_levels(c) for c in found],
            # What a round takes on the wall clock: its figure is not its duration, and a
            # confirmation's plan costs its pairs by this (`gate.confirm_plan`).
            ROUND_WALL_S: statistics.median(c.seconds for c in found)}


@pytest.mark.benchmark(group="server-capacity", timer=CLOCK)
def test_server_capacity(measure, load_config, server_tokenizer, bench_settings,
                         capacity_slo):
    """Seconds per request at the highest rate whose median latency stays within
    `capacity_slo` times one request's alone (see the module docstring)."""
    profile = bench_settings.profile
    num_tokens = profile.server_new_tokens
    params = SamplingParams(max_new_tokens=num_tokens, ignore_eos=True)
    prompts = list(questions())
    alone_ttft_s, alone_latency_s = _alone(load_config(num_requests=ALONE_REQUESTS), params,
                                           server_tokenizer, prompts, num_tokens)
    objectives = Objectives({"ttft": capacity_slo * alone_ttft_s * 1e3}, percentile=50.0)
    level_s, fewest = LEVEL_S, profile.capacity_requests

    def level_seconds(rate: float) -> float:
        measured, edge = _level_requests(rate, level_s, fewest)
        return (measured + 2 * edge) / rate

    # The first level: requests arrive as fast as one alone is answered.
    search = Search(start_rate=1.0 / alone_latency_s, tolerance=TOLERANCE,
                    budget_s=SEARCH_BUDGET_S)

    def run_level(rate: float):
        measured, edge = _level_requests(rate, level_s, fewest)
        config = load_config(num_requests=measured + 2 * edge)
        config = replace(config, warmup=edge, cooldown=edge, arrivals=Arrivals(rate),
                         own_process=True, lag_percentile=LAG_PERCENTILE,
                         max_lag_s=max(config.max_lag_s, LAG_OF_GAP / rate))
        release_thread_pool()
        return run_load(config, params, server_tokenizer, prompts, objectives=objectives)

    def one_search() -> Work:
        found = find_capacity(run_level, search, seconds_per_level=level_seconds)
        assert found.met_rate is not None, found.line()
        CLOCK.report(1.0 / found.estimate_rate())
        return Work(None, 0, record=found)

    measure(one_search, expect=Work(None, 0), not_counted=SERVER_WORK,
            summarize=_summary, slo=objectives.describe(), alone_ttft_ms=1e3 * alone_ttft_s,
            level_s=level_s, most_rounds=MOST_ROUNDS)
