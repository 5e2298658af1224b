"""One helper decides what this CPU can run (`llmbench.engine.cpu_features`): the engine's
refusals, the suite's skips and the tests' skips all ask it, and a test that needs a feature
is skipped with the reason where it is missing, never failed."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch
from gate_runs import REPO

from llmbench.engine import cpu_features
from llmbench.engine.device import has_native_bfloat16
from llmbench.engine.packed import check_packed_supported
from llmbench.errors import UserError
from tests.test_cli import assert_user_error, run_main

CPU = torch.device("cpu")


@pytest.mark.parametrize("avx512_bf16, amx, expected", [
    (True, False, True), (False, True, True), (False, False, False)])
def test_bfloat16_matmul_needs_avx512_bf16_or_amx(monkeypatch, avx512_bf16, amx, expected):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    # oneDNN's bfloat16 path (AVX512 core) is another question: it runs, emulated or not.
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    assert cpu_features.has(cpu_features.BF16_MATMUL) is expected
    assert has_native_bfloat16(CPU) is expected
    why = cpu_features.missing(cpu_features.BF16_MATMUL)
    assert why is None if expected else why == (
        "this CPU has no bfloat16 matmul in hardware (it needs AVX512-BF16 or AMX)")


def test_a_torch_without_the_probe_has_no_feature(monkeypatch):
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    assert not cpu_features.has(cpu_features.BF16_MATMUL)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_packing_asks_the_helper_for_onednn_half_paths(monkeypatch, dtype):
    feature = cpu_features.ONEDNN_HALF[dtype]
    monkeypatch.setattr(cpu_features, "has", lambda f: f is not feature)
    name = str(dtype).removeprefix("torch.")
    with pytest.raises(UserError, match=re.escape(
            f"needs oneDNN's {name} path: this CPU has no {feature.name} (it needs "
            f"{feature.needs}); use --dtype float32 or --weights native")):
        check_packed_supported(CPU, dtype)
    check_packed_supported(CPU, torch.float32)
    monkeypatch.setattr(cpu_features, "has", lambda f: True)
    check_packed_supported(CPU, dtype)


def test_bfloat16_packing_on_this_cpu_runs_or_is_refused_in_one_line(capsys):
    """Unpatched: on this very CPU, `--weights packed` in bfloat16 either packs and generates,
    or is refused in one line before anything loads, never a traceback from oneDNN."""
    code, out, err = run_main(["generate", "--model", "tiny", "--dtype", "bfloat16",
                               "--weights", "packed", "--max-new-tokens", "2"], capsys)
    if cpu_features.has(cpu_features.ONEDNN_BF16):
        assert code == 0, err
    else:
        assert_user_error(code, err, "--weights packed in bfloat16 needs oneDNN's bfloat16 "
                                     "path: this CPU has no oneDNN bfloat16")


def _pytest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           "-rs", *args], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_a_hidden_feature_skips_the_tests_that_need_it_with_the_reason():
    """The test of the tests: with oneDNN's bfloat16 hidden (as on an AVX2-only CPU), the
    packed-layer tests in bfloat16 are skipped, saying why, and the float32 ones still run."""
    proc = _pytest("tests/test_packed.py", "-k", "computes_what_nn_linear_does",
                   "--hide-cpu-feature=onednn-bf16")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "2 passed, 2 skipped" in out, out[-3000:]
    assert "this CPU has no oneDNN bfloat16 (it needs AVX512 (BW, VL, DQ) or AVX-NE-CONVERT)" \
        in out, out[-3000:]


def test_hiding_a_feature_reaches_the_engine_refusals_too():
    """The hidden feature is hidden from the product as well: the refusal test then sees the
    refusal whatever the CPU has."""
    proc = _pytest("tests/test_cpu_features.py", "-k", "runs_or_is_refused",
                   "--hide-cpu-feature=onednn-bf16", "--hide-cpu-feature=bf16-matmul")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "1 passed" in proc.stdout, proc.stdout[-3000:]


def test_a_test_that_plays_a_cpu_itself_is_not_overruled_by_the_hidden_feature():
    """Hiding answers where torch answers, so a test that replaces torch's probes to play
    another CPU still gets the answers it set, on a machine with every feature hidden."""
    proc = _pytest("tests/test_cpu_features.py", "tests/test_device.py", "-k",
                   "needs_avx512_bf16_or_amx or native_bfloat16_follows",
                   *(f"--hide-cpu-feature={key}" for key in cpu_features.FEATURES))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "8 passed" in proc.stdout, proc.stdout[-3000:]


def test_an_unknown_feature_to_hide_is_a_usage_error():
    proc = _pytest("tests/test_cpu_features.py", "--hide-cpu-feature=avx9000")
    assert proc.returncode == 4, proc.stderr[-2000:]
    assert "invalid choice: 'avx9000'" in proc.stderr
