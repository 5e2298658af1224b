"""Peak memory judged as a figure that can regress: what a case's untimed memory round needed
above what was in use when it began, with its own threshold (10% by default, and more than 128 MiB),
never across runs that recorded another figure."""

from __future__ import annotations

import json
import textwrap

import pytest
from gate_runs import make_run, quiet_history, run_pytest, suite_copy

from llmbench import gate
from llmbench.errors import Exit
from llmbench.gate.memory import MemoryStatus
from llmbench.runs import run_from_json

MIB = 1 << 20
DECODE_16 = "benchmarks/test_prefill_decode.py::test_decode_steps[ctx=16]"


def _run(seed, commit, peaks, *, fmt=2, key="peak_memory_added_bytes"):
    data = make_run(seed)
    data["commit_info"] = {"id": commit, "dirty": False}
    data["llmbench"]["format"] = fmt
    for bench in data["benchmarks"]:
        bench["extra_info"][key] = peaks.get(bench["fullname"], 500 * MIB)
    return run_from_json(data, f"run{seed}")


def _compare(base, cand, **options):
    return gate.compare_runs(base, cand, gate.GateOptions(**options), history=quiet_history())


def test_a_case_with_15_percent_more_peak_memory_fails_the_gate():
    base = _run(1, "a" * 40, {DECODE_16: 1000 * MIB})
    cand = _run(2, "b" * 40, {DECODE_16: 1150 * MIB})
    result = _compare(base, cand)
    (more,) = result.memory_regressions
    assert more.name == DECODE_16 and more.status is MemoryStatus.MORE
    assert result.exit_code == Exit.REGRESSION
    text = gate.render_text(result)
    assert ("memory: test_decode_steps[ctx=16]: more memory: 1000 MiB -> 1150 MiB above the "
            "case's start (+15.0%) (fails the gate)") in text
    assert gate.summary_line(result).startswith("REGRESSION: 0 regression")
    assert "1 with more peak memory" in gate.summary_line(result)
    assert json.loads(gate.render(result, "json"))["memory_regressions"] == [DECODE_16]


def test_its_own_threshold_and_a_floor_for_allocator_noise():
    base = _run(1, "a" * 40, {DECODE_16: 1000 * MIB})
    assert _compare(base, _run(2, "b" * 40, {DECODE_16: 1150 * MIB}),
                    memory_threshold=0.2).exit_code == Exit.OK
    # Two runs of one commit saw a server case add 11 and 68 MiB: +518%, but allocator noise.
    small = _run(1, "a" * 40, {k: 11 * MIB for k in base.benchmarks})
    grown = _run(2, "b" * 40, {k: 68 * MIB for k in base.benchmarks})
    assert {f.status for f in _compare(small, grown).memory} == {MemoryStatus.SAME}


def test_less_memory_is_shown_and_fails_nothing():
    result = _compare(_run(1, "a" * 40, {DECODE_16: 600 * MIB}),
                      _run(2, "b" * 40, {DECODE_16: 400 * MIB}))
    assert [f.status for f in result.memory if f.name == DECODE_16] == [MemoryStatus.LESS]
    assert result.exit_code == Exit.OK


@pytest.mark.parametrize("baseline", [
    _run(1, "a" * 40, {DECODE_16: 100 * MIB}, fmt=1),  # format 1: the process's peak
    _run(1, "a" * 40, {DECODE_16: 100 * MIB}, key="process_peak_memory_bytes"),
    _run(1, "a" * 40, {DECODE_16: 100 * MIB}, key="peak_memory_bytes"),  # includes the model
])
def test_figures_that_are_not_a_case_s_own_peak_are_never_judged(baseline):
    result = _compare(baseline, _run(2, "b" * 40, {DECODE_16: 900 * MIB}))
    assert {f.status for f in result.memory} == {MemoryStatus.NOT_COMPARABLE}
    assert not result.memory_regressions


def test_the_same_code_shows_a_memory_move_without_failing():
    base = _run(1, "a" * 40, {DECODE_16: 400 * MIB})
    result = gate.compare_runs(base, _run(2, "a" * 40, {DECODE_16: 600 * MIB}))
    assert result.same_code and result.exit_code == Exit.OK
    assert "more memory: 400 MiB -> 600 MiB above the case's start" in gate.render_text(result)


def test_the_threshold_is_a_flag_of_compare(tmp_path, capsys):
    from llmbench.cli import main

    base, cand = tmp_path / "env" / "0001_a.json", tmp_path / "c.json"
    base.parent.mkdir()
    for path, seed, commit, peak in ((base, 1, "a" * 40, 400), (cand, 2, "b" * 40, 460)):
        data = make_run(seed)
        data["commit_info"] = {"id": commit, "dirty": False}
        data["llmbench"]["format"] = 2
        for bench in data["benchmarks"]:
            bench["extra_info"]["peak_memory_added_bytes"] = peak * MIB
        path.write_text(json.dumps(data))
    assert main(["compare", str(base), str(cand), "--memory-threshold", "20%",
                 "--format", "json"]) != Exit.REGRESSION
    assert json.loads(capsys.readouterr().out)["options"]["memory_threshold"] == 0.2


# Every call to prefill also writes PLANT_MIB of memory while it runs, then frees it: one
# block (glibc maps it and unmaps it on free), or blocks under the mmap threshold with a
# small one kept above them, so the heap keeps them once freed unless they are handed back.
PLANT_PLUGIN = '''
import os

import numpy as np

KEPT = []


def pytest_collection_modifyitems(session, config, items):
    module, size = items[0].module, int(os.environ["PLANT_MIB"]) << 20
    real = module.prefill

    def planted(*args, **kwargs):
        if os.environ["PLANT_KIND"] == "mapped":
            blocks = [np.ones(size, dtype=np.uint8)]  # every page written: resident
        else:
            blocks = [b"\\1" * 100_000 for _ in range(size // 100_000)]
            KEPT.append(b"\\1" * 1_000)  # above the blocks: the heap's top stays
        out = real(*args, **kwargs)
        del blocks
        return out

    module.prefill = planted
'''
PREFILL_32 = "benchmarks/test_prefill_decode.py::test_prefill[in=32]"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["mapped", "heap"])
def test_a_case_s_figure_is_what_its_round_needs_on_the_real_suite(tmp_path, kind):
    """The tiny model's prefill needs almost nothing above what is in use; with 300 MiB
    planted in each call its figure holds them, and the comparison shows more memory. On
    the heap, the memory the timed rounds freed is still resident when the memory round
    starts unless it was handed back: without that, the figure would miss it."""
    copy = suite_copy(tmp_path / "suite")
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "plant_memory.py").write_text(textwrap.dedent(PLANT_PLUGIN))
    args = ["--benchmark-only", "--model", "tiny", "--threads", "1", "--rounds", "3",
            "-p", "no:cacheprovider", PREFILL_32]
    figures = {}
    for mib in (0, 300):
        out = tmp_path / f"runs{mib}"
        proc = run_pytest(copy, *args, f"--baseline-dir={out}", "-p", "plant_memory",
                          PYTHONPATH=str(tmp_path / "plugins"), PLANT_MIB=str(mib),
                          PLANT_KIND=kind)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
        (path,) = out.glob("*/*.json")
        (bench,) = json.loads(path.read_text())["benchmarks"]
        figures[mib] = (path, bench["extra_info"]["peak_memory_added_bytes"])
    assert figures[0][1] < 64 * MIB
    assert 290 * MIB <= figures[300][1] < 364 * MIB  # the kernel counts resident pages lazily
    result = gate.compare_runs(run_from_json(json.loads(figures[0][0].read_text()), "plain"),
                               run_from_json(json.loads(figures[300][0].read_text()), "planted"),
                               history=quiet_history())
    assert [(f.name, f.status) for f in result.memory] == [(PREFILL_32, MemoryStatus.MORE)]
