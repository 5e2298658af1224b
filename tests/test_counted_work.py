"""Counted work on real runs of the suite (tiny model, in subprocesses): a reference saved
once; the same code judged against it finds every case unchanged, at another thread count
too; each of three changes that add work (the cache off in one path, an extra clone() per
decoder layer, float64 logits) fails the run in one pass, naming the case and the ops; a
pure timing slowdown changes no count."""

from __future__ import annotations

import json
import shutil

import pytest
from gate_runs import REPO, SLOW_DECODE, TINY_ARGS, run_pytest, suite_copy

FAILED = pytest.ExitCode.TESTS_FAILED
USAGE_ERROR = pytest.ExitCode.USAGE_ERROR
NODE = "llmbench::work-reference"
CASES = ["benchmarks/test_prefill_decode.py::test_prefill[in=32]",
         "benchmarks/test_prefill_decode.py::test_decode_steps[ctx=16]",
         "benchmarks/test_output_sweep.py::test_output_sweep[in=128-out=16]"]
FAST = [*TINY_ARGS, "--rounds", "2", "--warmup-rounds", "0", "--no-save"]

PLUGINS = {
    # The generate path recomputes the whole sequence every step.
    "no_cache": '''
import functools
from llmbench.engine import loop

def pytest_configure(config):
    original = loop.generate

    @functools.wraps(original)
    def generate(*args, **kwargs):
        kwargs["use_cache"] = False
        return original(*args, **kwargs)

    loop.generate = generate
''',
    # One more copy of the hidden states in every decoder layer.
    "extra_clone": '''
import pytest

@pytest.fixture(scope="session", autouse=True)
def _clone_per_layer(model):
    def clone(module, args, output):
        return (output[0].clone(), *output[1:]) if isinstance(output, tuple) else output.clone()

    for layer in model.model.modules():
        if type(layer).__name__.endswith("DecoderLayer"):
            layer.register_forward_hook(clone)
''',
    # One more op per decode step, the smallest change there is.
    "extra_op": '''
import functools
from llmbench.engine import loop

def pytest_configure(config):
    original = loop.decode_step

    @functools.wraps(original)
    def decode_step(lm, token_ids, *args, **kwargs):
        return original(lm, token_ids.clone(), *args, **kwargs)

    loop.decode_step = decode_step
''',
    # The last position's logits upcast to float64 before the next token is picked.
    "float64_logits": '''
from llmbench.engine import loop

def pytest_configure(config):
    original = loop._forward

    def forward(*args, **kwargs):
        logits, cache = original(*args, **kwargs)
        return logits.double(), cache

    loop._forward = forward
''',
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """A copy of the suite with the output sweep beside prefill/decode, the injecting
    plugins, and a reference saved from a clean run."""
    root = suite_copy(tmp_path_factory.mktemp("work_suite"))
    shutil.copy2(REPO / "benchmarks" / "test_output_sweep.py", root / "benchmarks")
    for name, text in PLUGINS.items():
        (root / f"{name}.py").write_text(text)
    made = run_pytest(root, *FAST, f"--save-work-reference={root / 'reference'}", *CASES)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    return root


def _judge(suite, *args: str):
    proc = run_pytest(suite, *FAST, f"--work-reference={suite / 'reference'}", *CASES, *args)
    return proc.returncode, proc.stdout + proc.stderr


def test_the_saved_reference_holds_counts_and_no_timings(suite):
    (path,) = (suite / "reference").glob("*.json")
    assert path.name == "tiny-cpu-float32.json"
    data = json.loads(path.read_text())
    assert sorted(data["benchmarks"]) == sorted(CASES)
    work = data["benchmarks"][CASES[1]]
    assert work["num_ops"] == sum(work["ops"].values()) > 0 and work["flops"] > 0
    assert "stats" not in json.dumps(data) and "data" not in data


@pytest.mark.parametrize("threads", ["1", "2"])
def test_the_same_code_does_the_same_work_at_any_thread_count(suite, threads):
    code, out = _judge(suite, "--threads", threads)
    assert code == 0, out[-3000:]
    assert f"work against {suite / 'reference' / 'tiny-cpu-float32.json'}: 3 work unchanged" in out


def test_a_pure_timing_slowdown_changes_no_count(suite):
    code, out = _judge(suite, *SLOW_DECODE)
    assert code == 0, out[-3000:]
    assert "3 work unchanged" in out


@pytest.mark.parametrize("plugin, case, ops", [
    ("no_cache", "test_output_sweep[in=128-out=16]", "% FLOPs"),  # same ops, longer inputs
    ("extra_clone", "test_decode_steps[ctx=16]", "aten::clone"),
    ("float64_logits", "test_decode_steps[ctx=16]", "aten::_to_copy"),
])
def test_added_work_fails_the_run_naming_the_case_and_the_ops(suite, plugin, case, ops):
    code, out = _judge(suite, "-p", plugin)
    assert code == FAILED, out[-3000:]
    assert f"FAILED {NODE}" in out
    flagged = [line for line in out.splitlines() if f"{case}: more work:" in line]
    assert flagged and ops in flagged[0], out[-3000:]
    assert "WORK REGRESSION against" in out


def test_one_extra_op_a_decode_step_passes_at_1pct_and_fails_at_0_as_ci_runs(suite):
    code, out = _judge(suite, "-p", "extra_op")
    assert code == 0, out[-3000:]
    assert "test_decode_steps[ctx=16]: work changed: +10 aten::clone" in out
    code, out = _judge(suite, "-p", "extra_op", "--work-threshold=0")
    assert code == FAILED, out[-3000:]
    assert "test_decode_steps[ctx=16]: more work: +10 aten::clone" in out


def test_the_work_threshold_and_no_work_gate_let_it_pass(suite):
    code, out = _judge(suite, "-p", "float64_logits", "--no-work-gate")
    assert code == 0, out[-3000:]
    assert "more work" in out and "--no-work-gate" in out


def test_a_missing_reference_is_a_usage_error_saying_how_to_make_it(suite, tmp_path):
    proc = run_pytest(suite, *FAST, f"--work-reference={tmp_path}", CASES[0])
    out = proc.stdout + proc.stderr
    assert proc.returncode == USAGE_ERROR, out[-3000:]
    assert f"make it with --save-work-reference={tmp_path}" in out


def test_a_reference_that_cannot_be_written_is_one_line_and_a_usage_error(suite, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    proc = run_pytest(suite, *FAST, f"--save-work-reference={blocker}", CASES[0])
    out = proc.stdout + proc.stderr
    assert proc.returncode == USAGE_ERROR, out[-3000:]
    assert f"--save-work-reference: cannot write {blocker}/" in out
    assert "Traceback" not in out and "INTERNALERROR" not in out
