"""The `llmbench` command: user errors are one line on stderr and exit 2, never a
traceback; `generate` prints the result (as JSON on request) from either engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from llmbench import __version__
from llmbench.cli import main
from llmbench.engine import models
from llmbench.engine.device import available_devices
from llmbench.engine.models import registered_names
from llmbench.errors import Exit


def run_main(argv: list[str], capsys) -> tuple[int, str, str]:
    """`llmbench argv` in-process: (exit code, stdout, stderr)."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse exits for usage errors, --help and --version
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_user_error(code: int, err: str, *fragments: str) -> None:
    assert code == Exit.USAGE
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("llmbench"), lines[0]
    assert "error:" in lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.mark.parametrize("argv, fragments", [
    (["--max-new-tokens", "0"], ["--max-new-tokens", "must be at least 1, got 0"]),
    (["--max-new-tokens", "many"], ["--max-new-tokens", "expected a whole number"]),
    (["--device", "tpu"], ["--device", "invalid choice: 'tpu'"]),
    (["--dtype", "int3"], ["--dtype", "invalid choice: 'int3'"]),
    (["--temperature", "-1"], ["--temperature", "must be >= 0, got -1"]),
    (["--temperature=-0.5"], ["--temperature", "must be >= 0, got -0.5"]),
    (["--top-k", "-2"], ["--top-k", "expected a whole number >= 0"]),
    (["--top-p", "0"], ["--top-p", "must be in (0, 1]"]),
    (["--threads", "0"], ["--threads", "must be at least 1, got 0"]),
    (["--engine", "vllm"], ["--engine", "invalid choice: 'vllm'"]),
    (["--cache", "paged"], ["--cache", "invalid choice: 'paged'"]),
    (["--compile"], ["--compile needs --cache static"]),
    (["--attn", "flash"], ["--attn", "invalid choice: 'flash'"]),
])
def test_bad_flags_are_one_line_usage_errors(capsys, argv, fragments):
    code, out, err = run_main(["generate", "--model", "tiny", *argv], capsys)
    assert_user_error(code, err, *fragments)
    assert out == ""


def test_unknown_model_is_a_user_error(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = run_main(["generate", "--model", "no-such-model-llmbench"], capsys)
    assert_user_error(code, err, "unknown model 'no-such-model-llmbench'", "tiny")
    assert out == ""


def test_unknown_random_architecture_is_a_user_error(capsys):
    code, _, err = run_main(["generate", "--model", "gpt5@random"], capsys)
    assert_user_error(code, err, "no shipped config for 'gpt5'")


def test_absent_cuda_is_a_user_error(capsys, no_cuda):
    code, out, err = run_main(["generate", "--model", "tiny", "--device", "cuda"], capsys)
    assert_user_error(code, err, "device 'cuda' is not available", "present:", "cpu")
    assert out == ""


def test_prompt_longer_than_the_context_is_a_user_error(capsys, monkeypatch, gpt2_lm):
    requested = []

    def reuse_loaded(config):  # the worker's distilgpt2@random, instead of a second copy
        requested.append(config)
        return gpt2_lm

    monkeypatch.setattr(models, "load_model", reuse_loaded)
    prompt = " ".join(["word"] * 1100)
    code, out, err = run_main(["generate", "--model", "distilgpt2@random", "--device", "cpu",
                               "--max-new-tokens", "4", "--prompt", prompt], capsys)
    assert [(c.model, c.device) for c in requested] == [("distilgpt2@random", "cpu")]
    assert_user_error(code, err, "exceeds the model's context of 1024 tokens",
                      "max_new_tokens=4")
    assert out == ""


def test_infinite_temperature_is_a_user_error(capsys):
    code, _, err = run_main(["generate", "--model", "tiny", "--device", "cpu",
                             "--temperature", "inf"], capsys)
    assert_user_error(code, err, "temperature must be a finite number >= 0", "got inf")


def test_no_cache_with_the_hf_engine_is_a_user_error(capsys):
    code, _, err = run_main(["generate", "--model", "tiny", "--device", "cpu",
                             "--engine", "hf", "--no-cache"], capsys)
    assert_user_error(code, err, "--no-cache applies to the loop engine only")


def test_no_cache_with_a_static_cache_is_a_user_error(capsys, monkeypatch):
    monkeypatch.setattr(models, "load_model", lambda *a: pytest.fail("loaded the model"))
    code, _, err = run_main(["generate", "--model", "tiny", "--device", "cpu",
                             "--cache", "static", "--no-cache"], capsys)
    assert_user_error(code, err, "--no-cache contradicts --cache static")


def _absent_device() -> str:
    return next(d for d in ("cuda", "mps") if d not in available_devices())


def test_real_process_prints_one_line_and_exits_2():
    argv, fragment = ["generate", "--device", _absent_device()], "is not available on this"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "llmbench", *argv], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == Exit.USAGE
    assert proc.stdout == ""
    assert_user_error(proc.returncode, proc.stderr, fragment)


@pytest.mark.parametrize("extra, engine, kv_cache, attn", [
    ([], "loop", "dynamic", "sdpa"),
    (["--engine", "hf"], "hf", "dynamic", "sdpa"),
    (["--no-cache"], "loop-nocache", None, "sdpa"),
    (["--cache", "static"], "loop", "static", "sdpa"),
    (["--engine", "hf", "--cache", "static", "--attn", "eager"], "hf", "static", "eager"),
    pytest.param(["--cache", "static", "--compile"], "loop", "static", "sdpa",
                 marks=pytest.mark.xdist_group("inductor-compile")),
])
def test_generate_json(capsys, extra, engine, kv_cache, attn):
    code, out, err = run_main(["generate", "--model", "tiny", "--device", "cpu",
                               "--max-new-tokens", "4", "--fixed-length", "--json", *extra],
                              capsys)
    assert code == 0, err
    record = json.loads(out)
    assert record["output_tokens"] == 4
    assert len(record["token_ids"]) == 4
    assert len(record["decode_times_s"]) == 3
    assert record["finish_reason"] == "length"
    assert record["engine"] == engine
    assert record["kv_cache"] == kv_cache
    assert record["attn"] == attn
    assert record["compiled"] is ("--compile" in extra)
    assert record["device"] == "cpu"
    assert record["model"]["name"] == "tiny"
    assert record["model"]["architecture"] == "LlamaForCausalLM"
    assert record["input_tokens"] > 0
    assert "Traceback" not in err


def test_generate_json_is_the_same_from_both_engines_and_caches(capsys):
    base = ["generate", "--model", "tiny", "--device", "cpu", "--max-new-tokens", "5",
            "--fixed-length", "--json", "--no-chat", "--prompt", "Hello there"]
    loop = json.loads(run_main(base, capsys)[1])
    for extra in (["--engine", "hf"], ["--cache", "static"],
                  ["--engine", "hf", "--cache", "static"]):
        other = json.loads(run_main([*base, *extra], capsys)[1])
        assert other["token_ids"] == loop["token_ids"], extra
        assert other["text"] == loop["text"], extra
        assert other["input_tokens"] == loop["input_tokens"], extra


@pytest.mark.parametrize("engine", ["loop", "hf"])
def test_generate_with_a_top_p_below_float32_equals_greedy(capsys, engine):
    # 1e-300 rounds to 0 in float32; the sampler must still keep the best token.
    base = ["generate", "--model", "tiny", "--device", "cpu", "--max-new-tokens", "4",
            "--fixed-length", "--json", "--engine", engine]
    code, out, err = run_main([*base, "--temperature", "1", "--top-p", "1e-300"], capsys)
    assert code == 0 and "Traceback" not in err, err
    greedy = json.loads(run_main(base, capsys)[1])
    assert json.loads(out)["token_ids"] == greedy["token_ids"]


def test_generate_plain_prints_text_then_a_summary_line(capsys):
    code, out, err = run_main(["generate", "--model", "tiny", "--device", "cpu",
                               "--max-new-tokens", "3", "--fixed-length"], capsys)
    assert code == 0
    assert out.endswith("\n")
    summary = err.splitlines()[-1]
    assert summary.startswith("[tiny on cpu, loop, dynamic cache]")
    assert "3 out (length)" in summary


def test_models_lists_the_registered_names(capsys):
    code, out, _ = run_main(["models"], capsys)
    assert code == 0
    assert out.splitlines() == registered_names()


def test_version_and_missing_command(capsys):
    code, out, _ = run_main(["--version"], capsys)
    assert code == 0 and out.strip() == f"llmbench {__version__}"
    code, _, err = run_main([], capsys)
    assert_user_error(code, err, "required")


@pytest.mark.parametrize("command", ["generate", "serve"])
def test_weights_help_promises_no_fastest_path_and_points_to_the_measurement(command, capsys):
    """Which weights decode fastest depends on the CPU (packed was 1.6x faster on one VM and
    1.3x slower on another): the help says what each does and where to measure it."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "fast path" not in text
    assert "engines group measures them side by side" in text
