"""Compiled decode steps (`--compile`): the eager tokens from the loop and from
`model.generate`, one graph per shape with no graph break and no recompile across the
steps and requests of that shape, the option's refusals, and a benchmark that recompiles
inside its rounds failing instead of timing the compiler."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from llmbench.engine import compiled
from llmbench.engine.batching import generate_static_batch
from llmbench.engine.config import EngineConfig, SamplingParams
from llmbench.engine.hf import hf_generate
from llmbench.engine.loop import generate
from llmbench.engine.prompts import encode, exact_length_ids
from llmbench.errors import UserError

N_NEW = 8
# Compiling runs inductor's C++ compiler in bursts; the real paired A/A in test_pairing shares
# this group, so under `--dist loadgroup` (nox -s tests) the two never run side by side.
pytestmark = pytest.mark.xdist_group("inductor-compile")


@pytest.fixture(scope="module")
def compiled_tiny(tiny_lm):
    return dataclasses.replace(
        tiny_lm, compiled_decoder=compiled.compiled_decoder(tiny_lm.model, tiny_lm.device))


def greedy(n: int = N_NEW) -> SamplingParams:
    return SamplingParams(max_new_tokens=n, ignore_eos=True)


def prompt_of(lm) -> list[int]:
    return encode(lm.tokenizer, "Name three colours.", chat=True)


def test_compiled_decode_gives_the_eager_tokens_and_compiles_each_shape_once(
        tiny_lm, compiled_tiny):
    prompt = prompt_of(tiny_lm)
    eager = generate(tiny_lm, prompt, greedy(), kv_cache="dynamic").token_ids
    before = compiled.compile_counts()
    first = generate(compiled_tiny, prompt, greedy(), kv_cache="static")
    after_first = compiled.compile_counts()
    again = generate(compiled_tiny, prompt, greedy(), kv_cache="static")
    after_again = compiled.compile_counts()
    assert first.token_ids == again.token_ids == eager
    # The decode step really ran compiled (fullgraph=True: a graph break would have raised).
    assert (after_first - before).graphs >= 1
    # Every later step of the request, and the whole next request, reused that graph.
    assert after_again - after_first == compiled.CompileCounts(0, 0)


def test_compiled_left_padded_batch_gives_each_prompt_alone(tiny_lm, compiled_tiny):
    prompts = [exact_length_ids(tiny_lm.tokenizer, n)[-n:] for n in (5, 13)]
    alone = [generate(tiny_lm, p, greedy(), kv_cache="dynamic").token_ids for p in prompts]
    generate_static_batch(compiled_tiny, prompts, greedy(), kv_cache="static")  # compiles
    before = compiled.compile_counts()
    batch = generate_static_batch(compiled_tiny, prompts, greedy(), kv_cache="static")
    assert [r.token_ids for r in batch] == alone
    # The padding mask keeps one width for the whole request: no step recompiles.
    assert compiled.compile_counts() - before == compiled.CompileCounts(0, 0)


def test_generate_compiled_on_its_static_cache_gives_the_eager_tokens(tiny_lm, compiled_tiny):
    prompt = prompt_of(tiny_lm)
    eager = generate(tiny_lm, prompt, greedy(), kv_cache="dynamic").token_ids
    before = compiled.compile_counts()
    result = hf_generate(compiled_tiny, prompt, greedy(), kv_cache="static")
    assert result.token_ids == eager
    assert (compiled.compile_counts() - before).graphs >= 1  # generate did compile


def test_a_dynamic_cache_never_runs_the_compiled_decoder(tiny_lm, compiled_tiny):
    before = compiled.compile_counts()
    result = generate(compiled_tiny, prompt_of(tiny_lm), greedy(4), kv_cache="dynamic")
    assert result.output_tokens == 4
    assert compiled.compile_counts() - before == compiled.CompileCounts(0, 0)


def test_compile_needs_the_static_cache():
    with pytest.raises(UserError, match="--compile needs --cache static"):
        EngineConfig(compile=True)
    assert EngineConfig(kv_cache="static", compile=True).variant == "static-cache-compiled"


def test_compile_where_inductor_cannot_is_a_user_error(monkeypatch):
    with pytest.raises(UserError, match="--compile is not supported on mps"):
        compiled.check_compile_supported(torch.device("mps"))
    from torch._inductor import cpp_builder
    from torch._inductor.exc import InvalidCxxCompiler

    def no_compiler():
        raise InvalidCxxCompiler

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", no_compiler)
    with pytest.raises(UserError, match="needs the C\\+\\+ compiler inductor looks for"):
        compiled.check_compile_supported(torch.device("cpu"))


RECOMPILING_CASE = '''
import pytest
import torch

from fixtures.timing import Work

DOUBLE = torch.compile(lambda x: x * 2, dynamic=False)


@pytest.mark.benchmark(group="recompiles")
def test_recompiles_every_round(measure):
    sizes = iter(range(1, 100))

    def target():
        DOUBLE(torch.ones(next(sizes)))  # a new shape: a new graph, every call
        return Work(1, 1)

    measure(target, expect=Work(1, 1), compiled=True)
'''


def test_a_case_that_compiles_during_its_rounds_fails(tmp_path):
    from gate_runs import TINY_ARGS, run_pytest, suite_copy

    suite = suite_copy(tmp_path / "suite")
    (suite / "benchmarks" / "test_recompiles.py").write_text(RECOMPILING_CASE)
    proc = run_pytest(suite, *TINY_ARGS, "--no-save", "benchmarks/test_recompiles.py")
    out = proc.stdout + proc.stderr
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, out[-3000:]
    assert "the compiled case compiled again during its rounds" in out
