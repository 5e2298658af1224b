"""Counted work: the counters on known calls, the exact diff and its rule, and how the gate
shows and enforces it. Hand-computed expectations throughout."""

from __future__ import annotations

import copy

import pytest
import torch
from gate_runs import make_run

from llmbench.engine.config import SamplingParams
from llmbench.engine.counting import count_work
from llmbench.engine.loop import generate
from llmbench.engine.prompts import exact_length_ids
from llmbench.errors import Exit
from llmbench.gate import GateOptions, compare_runs, render
from llmbench.gate.work import WorkStatus, judge_work
from llmbench.runs.model import run_from_json

# --- the counters ------------------------------------------------------------------------

def test_a_linear_layer_counts_its_matmul_flops_and_the_bytes_it_moves():
    layer = torch.nn.Linear(64, 32)
    x = torch.randn(3, 64)
    with torch.inference_mode():
        out, work = count_work(layer, x)
    assert out.shape == (3, 32)
    # Counted after decomposition: linear is a transpose (a view) and one addmm.
    assert work.ops == {"aten::t": 1, "aten::addmm": 1}
    assert work.flops == 2 * 3 * 64 * 32
    # addmm reads bias (32), input (3x64) and weight (32x64); writes 3x32. The view moves 0.
    assert work.bytes_read == 4 * (32 + 3 * 64 + 32 * 64)
    assert work.bytes_written == 4 * 3 * 32


def test_views_move_nothing_and_in_place_ops_count_what_they_write():
    x = torch.randn(8, 8)
    _, views = count_work(lambda t: t.view(64).t().unsqueeze(0), x)
    assert views.bytes == 0 and views.num_ops == 3
    _, in_place = count_work(lambda t: t.add_(1.0), x.clone())
    assert in_place.ops == {"aten::add_.Tensor": 1}
    assert in_place.bytes_read == 4 * 64 and in_place.bytes_written == 4 * 64


def test_cpu_flash_attention_gets_pytorchs_attention_flop_formula():
    q = torch.randn(1, 2, 5, 8)
    with torch.inference_mode():
        _, work = count_work(torch.nn.functional.scaled_dot_product_attention, q, q, q)
    # Two matmuls of [5x8]x[8x5] and [5x5]x[5x8] per head: 2 * 2 * (5*5*8) * 2 heads.
    assert work.flops == 2 * 2 * 5 * 5 * 8 * 2
    assert work.num_ops >= 1


def test_counts_of_a_real_generation_repeat_exactly_and_ignore_the_thread_count(tiny_lm):
    prompt = exact_length_ids(tiny_lm.tokenizer, 24)
    params = SamplingParams(max_new_tokens=4, ignore_eos=True)
    counts = []
    for threads in (1, 2, 1):
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            result, work = count_work(generate, tiny_lm, prompt, params)
        finally:
            torch.set_num_threads(before)
        assert result.output_tokens == 4
        counts.append(work)
    assert counts[0] == counts[1] == counts[2]
    assert counts[0].num_ops > 100 and counts[0].flops > 0 and counts[0].bytes > 0


def test_the_cache_off_path_counts_more_work_than_the_cache_on_path(tiny_lm):
    prompt = exact_length_ids(tiny_lm.tokenizer, 24)
    params = SamplingParams(max_new_tokens=6, ignore_eos=True)
    _, cached = count_work(generate, tiny_lm, prompt, params)
    _, recomputed = count_work(generate, tiny_lm, prompt, params, use_cache=False)
    finding = judge_work("gen", {"work": cached.to_json()}, {"work": recomputed.to_json()})
    assert finding.status is WorkStatus.MORE
    # The tiny model spends most FLOPs in its 49k-word head, which runs once a step either
    # way; the recomputed attention and MLPs still add half again.
    assert recomputed.flops > 1.4 * cached.flops


# --- the diff and its rule ------------------------------------------------------------------

def _counts(ops: dict[str, int], flops: int = 1000, read: int = 500, written: int = 500,
            **extra) -> dict:
    return {"work": {"num_ops": sum(ops.values()), "flops": flops, "bytes_read": read,
                     "bytes_written": written, "graphs_compiled": None, "graph_breaks": None,
                     "ops": ops, **extra}}


BASE_OPS = {"aten::addmm": 100, "aten::mul.Tensor": 200, "aten::t": 100}


@pytest.mark.parametrize("candidate, status", [
    (_counts(BASE_OPS), WorkStatus.UNCHANGED),
    (_counts({**BASE_OPS, "aten::clone": 30}, read=530, written=530), WorkStatus.MORE),
    (_counts(BASE_OPS, flops=1011), WorkStatus.MORE),  # 1.1% more FLOPs
    (_counts(BASE_OPS, flops=1010), WorkStatus.CHANGED),  # 1.0%: not beyond the threshold
    (_counts({**BASE_OPS, "aten::mul.Tensor": 150}, read=450, written=450), WorkStatus.LESS),
    (_counts({"aten::addmm": 100, "aten::mul.Tensor": 199, "aten::add.Tensor": 1,
              "aten::t": 100}), WorkStatus.CHANGED),  # an op traded for another
    (_counts(BASE_OPS, graphs_compiled=1), WorkStatus.MORE),
])
def test_the_work_rule(candidate, status):
    base = _counts(BASE_OPS, graphs_compiled=0)
    finding = judge_work("case", base, candidate)
    assert finding.status is status
    assert finding.is_regression == (status is WorkStatus.MORE)


def test_the_finding_names_the_ops_that_changed_most_and_the_relative_sizes():
    base = _counts(BASE_OPS)
    cand = _counts({**BASE_OPS, "aten::clone": 30, "aten::t": 101}, flops=1120, read=540,
                   written=541)
    finding = judge_work("case", base, cand)
    assert finding.describe() == "+30 aten::clone, +1 aten::t, +12.0% FLOPs, +8.1% bytes"


def test_a_case_without_counts_is_not_counted_and_says_why():
    finding = judge_work("case", {"work": {"not_counted": "the server works elsewhere"}},
                         _counts(BASE_OPS))
    assert finding.status is WorkStatus.NOT_COUNTED
    assert finding.describe() == "baseline: the server works elsewhere"
    old = judge_work("case", {"output_tokens": 3}, _counts(BASE_OPS))
    assert "saved before llmbench counted it" in old.describe()


# --- the gate -------------------------------------------------------------------------------

def _run(seed: int, work: dict[str, dict], versions: dict | None = None):
    data = make_run(seed)
    for entry in data["benchmarks"]:
        entry["extra_info"].update(copy.deepcopy(work.get(entry["name"], _counts(BASE_OPS))))
    if versions:
        data["llmbench"]["environment"]["versions"].update(versions)
    return run_from_json(data, f"run{seed}")


MORE_DECODE = {"test_decode_steps[ctx=16]": _counts({**BASE_OPS, "aten::clone": 30},
                                                    read=530, written=530)}


def test_more_work_fails_the_gate_whatever_the_timing_says():
    result = compare_runs(_run(0, {}), _run(1, MORE_DECODE), GateOptions(threshold=0.5))
    assert result.counts["regression"] == 0  # the timings are the same code's
    assert [f.name.split("::")[1] for f in result.work_regressions] == [
        "test_decode_steps[ctx=16]"]
    assert result.exit_code == Exit.REGRESSION
    text = render(result, "text")
    assert ("work: test_decode_steps[ctx=16]: more work: +30 aten::clone, +6.0% bytes "
            "(fails the gate)") in text
    assert "work counted: 3 work unchanged, 1 more work" in text
    assert text.splitlines()[-1].startswith("REGRESSION: 0 regression")
    assert "1 with more work" in text.splitlines()[-1]
    md = render(result, "markdown")
    assert "+30 aten::clone" in md and "| MORE |" in md
    as_json = __import__("json").loads(render(result, "json"))
    assert as_json["work_regressions"] == [f.name for f in result.work_regressions]
    assert as_json["work_gated"] is True


def test_no_work_gate_and_a_larger_threshold_report_without_failing():
    for options in (GateOptions(threshold=0.5, work_gate=False),
                    GateOptions(threshold=0.5, work_threshold=0.10)):
        result = compare_runs(_run(0, {}), _run(1, MORE_DECODE), options)
        assert result.exit_code == Exit.OK
        assert "+30 aten::clone" in render(result, "text")


def test_other_torch_versions_show_the_work_diff_but_never_fail_on_it():
    result = compare_runs(_run(0, {}), _run(1, MORE_DECODE, {"torch": "2.14.0+cpu"}),
                          GateOptions(threshold=0.5))
    assert result.work_regressions == [] and result.exit_code == Exit.OK
    text = render(result, "text")
    assert "(not gated: versions differ)" in text
    assert "never fails the gate here: torch 2.13.0+cpu -> 2.14.0+cpu" in text


def test_identical_counts_read_work_unchanged():
    result = compare_runs(_run(0, {}), _run(1, {}), GateOptions(threshold=0.5))
    assert {f.status for f in result.work} == {WorkStatus.UNCHANGED}
    assert "work counted: 4 work unchanged" in render(result, "text")


def test_the_report_lists_each_cases_work_and_what_changed_against_the_baseline():
    from llmbench.report.work_table import work_table

    candidate = _run(1, MORE_DECODE)
    result = compare_runs(_run(0, {}), candidate, GateOptions(threshold=0.5))
    lines = work_table(candidate, result)
    assert lines[0] == "| benchmark | aten ops | FLOPs | bytes | vs baseline |"
    row = next(line for line in lines if "ctx=16" in line)
    assert row == ("| `test_decode_steps[ctx=16]` | 430 | 1 k | 1.06 kB | **more work**: "
                   "+30 aten::clone, +6.0% bytes |")
    assert sum("work unchanged" in line for line in lines) == 3
    assert work_table(_run(2, {}), None)[0] == "| benchmark | aten ops | FLOPs | bytes |"
    bare = make_run(3)
    assert work_table(run_from_json(bare, "old"), None) == []  # saved before counting
