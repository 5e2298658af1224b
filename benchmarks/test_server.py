"""The server as users feel it: request latency against the engine's own, and streamed
requests across concurrency levels, which give time to first token, inter-token latency
and total throughput (concurrency 1 is the plain `/stream` case).

The in-process server decodes on its scheduler's thread while this one waits for answers,
so each round first frees this thread's OpenMP pool (`engine.openmp`): with two pools the
server would decode slower than `llmbench serve` does in its own process."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from fixtures.server import SERVER_WORK
from fixtures.timing import Work
from llmbench.engine.config import SamplingParams
from llmbench.engine.loop import generate
from llmbench.engine.openmp import release_thread_pool
from llmbench.engine.prompts import encode, questions
from llmbench.load.client import complete_once, run_load

QUESTION = questions()[0]


def _load_work(result, num_requests: int, num_tokens: int) -> Work:
    """The round's work as the server reported it; every request must have succeeded."""
    assert result.num_errors == 0, result.summary()["errors"]
    assert len(result.ok) == num_requests
    counts = [s.server_output_tokens if s.server_output_tokens is not None else s.output_tokens
              for s in result.ok]
    assert counts == [num_tokens] * num_requests, counts
    # A server that reports no prompt tokens (llama-cpp-python's, streaming) leaves them
    # unknown: recorded as such, never as 0.
    inputs = [s.input_tokens for s in result.ok]
    return Work(None if None in inputs else sum(inputs), sum(counts))


def _median_of(results, metric: str, percentile: str = "p50") -> float | None:
    values = [r.summary()[metric][percentile] for r in results if r.summary()[metric]]
    return statistics.median(values) if values else None


def _stream_summary(results) -> dict:
    """Client-side TTFT and ITL: each round's percentile, then the median over rounds. Beside
    them the server's own decode pace for the same requests, and their ratio (the serving
    overhead: what HTTP, streaming and the event loop add to each token), when the server
    reports its decode (llmbench's native API does)."""
    overheads = [r.serving_overhead for r in results if r.serving_overhead is not None]
    return {"ttft_ms": _median_of(results, "ttft_ms"), "itl_ms": _median_of(results, "itl_ms"),
            "itl_p90_ms": _median_of(results, "itl_ms", "p90"),
            "tpot_ms": _median_of(results, "tpot_ms"),
            "server_decode_ms": _median_of(results, "server_decode_ms"),
            "serving_overhead": statistics.median(overheads) if overheads else None}


@pytest.mark.benchmark(group="server-generate")
def test_server_generate(measure, load_config, server_output):
    """One non-streamed request at a time, end to end through HTTP."""
    params = SamplingParams(max_new_tokens=server_output, ignore_eos=True)
    config = load_config()

    def request():
        release_thread_pool()  # this thread's pool would slow the in-process server's
        reply = complete_once(config, QUESTION, params)
        return Work(reply["input_tokens"], reply["output_tokens"])

    measure(request, expect=Work(None, server_output), not_counted=SERVER_WORK)


@pytest.mark.benchmark(group="server-generate")
def test_engine_generate(measure, model, bench_settings, server_output):
    """The same request straight through the engine: the server's overhead is the ratio
    of test_server_generate to this."""
    if bench_settings.server_url:
        pytest.skip("an external server has no in-process engine to compare with")
    params = SamplingParams(max_new_tokens=server_output, ignore_eos=True)
    prompt = encode(model.tokenizer, QUESTION, chat=model.is_chat)
    measure(lambda: generate(model, prompt, params), expect=Work(len(prompt), server_output))


@pytest.mark.benchmark(group="server-concurrency")
def test_server_concurrency(measure, load_config, server_tokenizer, bench_settings,
                            concurrency):
    """`concurrency` streamed requests at once; the round's time is the whole level's, so
    tokens_per_second is the server's total output throughput. Each round also records
    the client-side TTFT and inter-token latency (at concurrency 1: those of `/stream`)."""
    num_tokens = bench_settings.profile.server_new_tokens
    params = SamplingParams(max_new_tokens=num_tokens, ignore_eos=True)
    config = load_config(concurrency=concurrency, num_requests=concurrency)
    prompts = list(questions()[:concurrency])

    def level():
        release_thread_pool()  # this thread's pool would slow the in-process server's
        result = run_load(config, params, server_tokenizer, prompts)
        return replace(_load_work(result, concurrency, num_tokens), record=result)

    measure(level, expect=Work(None, concurrency * num_tokens), not_counted=SERVER_WORK,
            concurrency=concurrency,
            summarize=lambda rounds: _stream_summary([work.record for work in rounds]))
