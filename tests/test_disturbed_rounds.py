"""The suite with disturbed rounds planted (`planted_disturbance`): each is measured again,
left out of the samples every verdict reads, and counted in the saved run; a benchmark whose
every round was disturbed gets no verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gate_runs import REPO, run_pytest

from llmbench import runs
from llmbench.gate import compare_runs, render_text
from llmbench.gate.stats import Verdict

PREFILL = "benchmarks/test_prefill_decode.py::test_prefill[in=32]"
ARGS = ["--benchmark-only", "--model", "tiny", "--threads", "1", "--warmup-rounds", "0",
        "-p", "no:cacheprovider", "-p", "planted_disturbance", "--disturbed-share=3%"]
pytestmark = pytest.mark.slow


def _run(tmp_path: Path, planted: str, rounds: int, name: str) -> Path:
    folder = tmp_path / name
    proc = run_pytest(REPO, *ARGS, f"--rounds={rounds}", f"--baseline-dir={folder}", PREFILL,
                      LLMBENCH_PLANTED_DISTURBED=planted,
                      PYTHONPATH=str(REPO / "tests"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (path,) = folder.glob("*/*.json")
    return path


def test_disturbed_rounds_are_measured_again_and_left_out(tmp_path):
    path = _run(tmp_path, "1,3", rounds=5, name="two")
    run = json.loads(path.read_text())
    saved = run["benchmarks"][0]
    assert len(saved["stats"]["data"]) == 7  # 5 rounds, 2 of them measured again
    # The run's own stability figures, over its undisturbed rounds, and the machine's state.
    stability = run["llmbench"]["stability"]
    assert stability["disturbed_rounds"] == 2
    assert stability["rounds_spread"][PREFILL] == stability["rounds_spread_median"] > 0
    # Five rounds in five passes: a control sample after each share of the one benchmark.
    assert len(run["llmbench"]["control_s"]) == 5 and stability["control_spread"] > 0
    assert run["llmbench"]["machine"]["torch threads"]["state"].startswith("1 on ")
    assert saved["extra_info"]["disturbed_rounds"] == 2
    recorded = saved["extra_info"]["disturbance"]
    assert recorded["left_out"] == [1, 3]
    assert recorded["share"] == pytest.approx(0.03)
    assert [s > 0.03 for s in recorded["others_share"]] == [False, True, False, True,
                                                            False, False, False]
    bench = runs.load_run(path).benchmarks[PREFILL]
    data = saved["stats"]["data"]
    assert bench.samples == tuple(x for i, x in enumerate(data) if i not in (1, 3))
    assert bench.rounds == 5 and not bench.all_disturbed
    assert bench.disturbed_rounds == 2


def test_a_benchmark_with_every_round_disturbed_gets_no_verdict(tmp_path):
    quiet = _run(tmp_path, "", rounds=3, name="quiet")
    every = _run(tmp_path, ",".join(map(str, range(10))), rounds=3, name="every")
    data = json.loads(every.read_text())
    data["commit_info"].update(id="f" * 40, dirty=False)  # other code: a verdict is asked for
    every.write_text(json.dumps(data))
    saved = data["benchmarks"][0]
    assert len(saved["stats"]["data"]) == 6  # at most as many again: then it stops
    assert saved["extra_info"]["disturbed_rounds"] == 6
    base, cand = runs.load_run(quiet), runs.load_run(every)
    assert cand.benchmarks[PREFILL].all_disturbed
    assert base.benchmarks[PREFILL].disturbed_rounds == 0
    result = compare_runs(base, cand)
    (c,) = result.comparisons
    assert c.verdict is Verdict.INCONCLUSIVE
    assert "every round of the candidate was disturbed" in c.reason
    text = render_text(result)
    assert ("rounds disturbed by other work (left out, re-measured where the run could): "
            "baseline none; candidate 6 rounds in 1 of 1 benchmarks, 1 with every round "
            "disturbed (no verdict)") in text
