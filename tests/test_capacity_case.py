"""The suite's server-capacity case: each round a capacity search against the live server,
its figure (seconds per request at the capacity found) recorded as the round's time through
a `FigureClock`, so the saved run, the gate and a paired A/B treat it as any time."""

from __future__ import annotations

import json

import pytest
from gate_runs import REPO, run_pytest, suite_copy

from fixtures.timing import FigureClock
from llmbench.runs.model import ROUND_WALL_S


def test_a_figure_clock_stands_still_until_a_round_reports_its_figure():
    clock = FigureClock("case")
    start = clock()
    assert clock() == start
    clock.report(0.25)
    clock.report(0.5)
    assert clock() - start == pytest.approx(0.75)
    with pytest.raises(ValueError, match="zero or more seconds"):
        clock.report(-1.0)
    with pytest.raises(ValueError):
        clock.report(float("nan"))


@pytest.mark.alone  # each level's latencies are the server's, beside no other worker's load
def test_the_capacity_case_saves_seconds_per_request_at_the_capacity_found(tmp_path):
    suite = suite_copy(tmp_path / "suite")
    case = (REPO / "benchmarks" / "test_server_capacity.py").read_text()
    assert case.count("LEVEL_S = 8.0") == case.count("MOST_ROUNDS = 5") == 1
    # Levels of a second: the searches, not their precision, are what this test checks;
    # and the case's cap on its rounds below the rounds asked.
    (suite / "benchmarks" / "test_server_capacity.py").write_text(
        case.replace("LEVEL_S = 8.0", "LEVEL_S = 1.0").replace("MOST_ROUNDS = 5",
                                                               "MOST_ROUNDS = 2"))
    saved = tmp_path / "run.json"
    proc = run_pytest(suite, "benchmarks/test_server_capacity.py", "--benchmark-only",
                      "--model", "tiny", "--threads", "1", "--profile", "full",
                      "--rounds", "4", "--warmup-rounds", "0", "--passes", "1", "--no-save",
                      f"--benchmark-json={saved}", "-p", "no:cacheprovider")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (bench,) = json.loads(saved.read_text())["benchmarks"]
    assert bench["name"] == "test_server_capacity[ttft=3x]"
    assert bench["group"] == "server-capacity"
    assert bench["options"]["timer"] == "FigureClock(test_server_capacity)"
    info = bench["extra_info"]
    rates = info["capacity_rps_rounds"]
    assert len(rates) == 2 and all(rate > 0 for rate in rates)
    # Each round's time is its figure: one over the capacity it found.
    assert bench["stats"]["data"] == pytest.approx([1 / rate for rate in rates], rel=1e-3)
    assert info["slo"] == f"p50 ttft {3 * info['alone_ttft_ms']:g} ms"
    assert info["level_s"] == 1.0 and info["levels_per_round"] >= 2
    # Each level the searches ran: its rate, verdict, median TTFT, bound, queue, and lag.
    assert len(info["levels"]) == 2 and all(len(levels) >= 2 for levels in info["levels"])
    assert all(len(level) == 7 and level[1] in ("met", "missed", "uncertain", "not sustained")
               for levels in info["levels"] for level in levels)
    # A round is a whole search on the wall clock, many requests long.
    assert info[ROUND_WALL_S] > 10 * bench["stats"]["median"]
    assert info["work"] == {"not_counted": "the server works on its own threads"}
