"""The load client: token counting and per-token ITL on hand-made streams, SSE parsing of
both protocols, judging answers (empty, short), summaries, the CLI and its exit codes,
runs against a fake OpenAI-compatible server that answers badly, and against a live tiny
server."""

import argparse
import asyncio
import contextlib
import itertools
import json

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse

from llmbench import cli
from llmbench.cli import load as cli_load
from llmbench.cli import server as cli_server
from llmbench.engine.config import EngineConfig, SamplingParams
from llmbench.engine.models import load_model
from llmbench.errors import UserError
from llmbench.load.client import ServerError, complete_once, run_load, stream_request
from llmbench.load.config import LoadConfig
from llmbench.load.result import (
    LoadResult,
    RequestSample,
    judged,
    summary_line,
    token_timeline,
)
from llmbench.serve.app import ServerSettings, create_app, running_server
from llmbench.serve.streaming import IncrementalDetokenizer


def words(text: str) -> int:
    """A stand-in tokenizer: one token per whitespace-separated word."""
    return len(text.split())


class WordTokenizer:
    def __call__(self, text: str, add_special_tokens: bool = True) -> dict:
        return {"input_ids": list(range(words(text)))}


@pytest.fixture(scope="module")
def lm():
    """The tiny random model (real SmolLM2 tokenizer)."""
    return load_model(EngineConfig(model="tiny", device="cpu"))


@pytest.fixture(scope="module")
def live(lm):
    """A real uvicorn server for the tiny model on a free loopback port."""
    app = create_app(lm, ServerSettings(max_new_tokens_cap=64))
    with running_server(app) as url:
        yield url


# -- counting and timing -----------------------------------------------------------------


def test_multi_token_chunks_spread_their_interval_over_their_tokens():
    chunks = [(0.10, "a"), (0.20, " b c"), (0.50, " d"), (0.90, " e f g h")]
    ttft, itl, tokens = token_timeline(chunks, words)
    assert ttft == 0.10
    assert tokens == 8
    assert itl == pytest.approx([0.05, 0.05, 0.30, 0.10, 0.10, 0.10, 0.10])
    # N tokens give N - 1 intervals, whose mean is the request's TPOT.
    assert sum(itl) / len(itl) == pytest.approx((0.90 - 0.10) / (tokens - 1))


def test_first_chunk_extra_tokens_and_empty_chunks():
    # Tokens that came with the first one arrived with it: intervals of 0. A chunk that
    # adds no token (held-back bytes, a bare space) is not an arrival: its time folds into
    # the next token-bearing chunk.
    chunks = [(0.2, "x y z"), (0.3, " "), (0.4, ""), (0.6, "w")]
    ttft, itl, tokens = token_timeline(chunks, words)
    assert (ttft, tokens) == (0.2, 4)
    assert itl == pytest.approx([0.0, 0.0, 0.4])


def test_merging_chunks_never_count_negative_tokens():
    # "ab" + "c" -> one word "abc": the count does not grow, so no interval is recorded.
    ttft, itl, tokens = token_timeline([(0.1, "ab"), (0.2, "c"), (0.5, " d")], words)
    assert (ttft, itl, tokens) == (0.1, pytest.approx((0.4,)), 2)
    assert token_timeline([], words) == (None, (), 0)


def test_real_tokenizer_counts_tokens_not_chunks(lm):
    text = "héllo 世界 🎉 and some plain words"
    ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
    detok = IncrementalDetokenizer(lm.tokenizer)
    deltas = [detok.push(i) for i in ids]
    chunks = [(0.01 * (n + 1), d) for n, d in enumerate(deltas) if d]
    assert len(chunks) < len(ids)  # the multi-byte characters merged tokens into chunks

    def count(s):
        return len(lm.tokenizer(s, add_special_tokens=False)["input_ids"])

    ttft, itl, tokens = token_timeline(chunks, count)
    assert tokens == len(ids)
    assert len(itl) == tokens - 1
    assert sum(itl) == pytest.approx(chunks[-1][0] - ttft)


def test_summary_percentiles_and_errors():
    config = LoadConfig(url="http://127.0.0.1:1", concurrency=2, num_requests=5)
    samples = tuple(RequestSample(latency_s=s, ttft_s=s / 10, itl_s=(0.01, 0.03),
                                  output_tokens=3, counted_by="server", tokenizer_tokens=3)
                    for s in (1.0, 2.0, 3.0, 4.0))
    result = LoadResult(config, SamplingParams(), duration_s=2.0,
                        samples=samples + (RequestSample(0.0, reason="HTTP 503",
                                                         error="HTTP 503: busy"),))
    summary = result.summary()
    assert summary["latency_ms"] == pytest.approx(
        {"mean": 2500.0, "p50": 2500.0, "p90": 3700.0, "p99": 3970.0})
    assert summary["itl_ms"]["p50"] == pytest.approx(20.0)
    assert summary["tpot_ms"]["mean"] == pytest.approx(1000 * (2.5 - 0.25) / 2)
    assert (summary["num_ok"], summary["num_errors"], summary["errors"]) == (
        4, 1, ["HTTP 503: busy"])
    assert summary["errors_by_reason"] == {"HTTP 503": 1} and not summary["is_mostly_failed"]
    assert result.token_throughput == 6.0 and result.request_throughput == 2.0
    assert summary["server_decode_ms"] is None and summary["serving_overhead"] is None
    assert "serving overhead" not in summary_line(summary)  # the server did not say
    json.dumps(result.to_dict())


def test_serving_overhead_is_the_clients_itl_over_the_servers_own_decode():
    config = LoadConfig(url="http://127.0.0.1:1", concurrency=1, num_requests=2)
    samples = tuple(RequestSample(latency_s=1.0, ttft_s=0.1, itl_s=(0.012, 0.012, 0.018),
                                  output_tokens=4, counted_by="server", tokenizer_tokens=4,
                                  server_decode_s=d) for d in (0.010, 0.010))
    summary = LoadResult(config, SamplingParams(), 1.0, samples).summary()
    assert summary["server_decode_ms"]["p50"] == pytest.approx(10.0)
    assert summary["serving_overhead"] == pytest.approx(1.2)
    assert "serving overhead x1.20" in summary_line(summary)


# -- judging answers ---------------------------------------------------------------------


def _answer(text_tokens: int, server: int | None) -> RequestSample:
    """A stream that brought `text_tokens` tokens of text, the server counting `server`."""
    return RequestSample(latency_s=1.0, ttft_s=0.1 if text_tokens else None,
                         output_tokens=text_tokens if server is None else server,
                         counted_by="tokenizer" if server is None else "server",
                         tokenizer_tokens=text_tokens, server_output_tokens=server)


def test_empty_answers_fail_even_without_a_fixed_length():
    free = SamplingParams(max_new_tokens=8)
    no_text = judged(_answer(0, None), free)
    assert no_text.reason == "empty answer" and "without any text" in no_text.error
    # Text that the server says holds no token is as empty: its count is the one judged.
    assert judged(_answer(3, 0), free).reason == "empty answer"
    assert judged(_answer(3, None), free).error is None  # stopping early is allowed


def test_short_fixed_length_answers_fail_by_the_count_that_was_judged():
    fixed = SamplingParams(max_new_tokens=8, ignore_eos=True)
    short = judged(_answer(8, 5), fixed)
    assert short.reason == "short answer"
    assert short.error == "short answer: 5 by the server's count, 8 asked for"
    # Text that re-tokenizes short, from a server that counted all it generated, is served.
    assert judged(_answer(7, 8), fixed).error is None
    assert judged(_answer(7, None), fixed).error == (
        "short answer: 7 by the tokenizer's count, 8 asked for")
    failed = RequestSample(0.2, reason="timeout", error="ReadTimeout: slow")
    assert judged(failed, fixed) is failed


def _level(samples, num_cut_off: int = 0) -> LoadResult:
    config = LoadConfig(url="http://127.0.0.1:1", concurrency=4, num_requests=8)
    return LoadResult(config, SamplingParams(max_new_tokens=8, ignore_eos=True), 2.0,
                      tuple(samples), num_cut_off=num_cut_off)


def test_goodput_counts_only_served_requests_and_failures_by_reason():
    fixed = SamplingParams(max_new_tokens=8, ignore_eos=True)
    served = [_answer(8, 8)] * 5
    bad = [judged(_answer(0, None), fixed), judged(_answer(8, 4), fixed)]
    result = _level(served + bad, num_cut_off=1)
    summary = result.summary()
    assert (summary["num_requests"], summary["num_ok"], summary["num_errors"]) == (8, 5, 3)
    assert summary["errors_by_reason"] == {"empty answer": 1, "short answer": 1, "cut off": 1}
    assert result.request_throughput == 2.5  # 5 served in 2 s; the 4 tokens short are not
    assert result.token_throughput == 20.0
    assert summary["tokens_counted_by"] == {"server": 5}
    assert not summary["is_mostly_failed"]
    assert summary_line(summary).startswith(
        "concurrency 4: 5 ok, 3 errors (1 empty answer, 1 short answer, 1 cut off); "
        "served 20.0 tokens/s, 2.50 req/s; ms p50/p99: TTFT 100.0/100.0,")
    assert summary_line(summary).endswith("; tokens counted by the server")


def test_a_level_where_most_requests_failed_says_so_first():
    fixed = SamplingParams(max_new_tokens=8, ignore_eos=True)
    result = _level([_answer(8, None)] + [judged(_answer(0, None), fixed)] * 7)
    summary = result.summary()
    assert summary["is_mostly_failed"]
    line = summary_line(summary)
    assert line.startswith("concurrency 4: MOSTLY FAILED: 7 of 8 requests failed "
                           "(7 empty answer), 1 ok; served 4.0 tokens/s, 0.50 req/s;")
    assert line.endswith("; tokens counted by the tokenizer")
    # Half is not most.
    half = _level([_answer(8, 8)] * 4 + [judged(_answer(0, None), fixed)] * 4).summary()
    assert not half["is_mostly_failed"] and "MOSTLY" not in summary_line(half)
    nothing = summary_line(_level([], num_cut_off=2).summary())
    assert nothing == ("concurrency 4: MOSTLY FAILED: 2 of 2 requests failed (2 cut off), "
                       "0 ok; served 0.0 tokens/s, 0.00 req/s; ms p50/p99: TTFT -, ITL -, "
                       "TPOT -, latency -")


def test_load_config_is_validated():
    with pytest.raises(UserError, match="api"):
        LoadConfig(api="grpc")
    with pytest.raises(UserError, match="at least 1"):
        LoadConfig(concurrency=0)
    with pytest.raises(UserError, match="http"):
        LoadConfig(url="127.0.0.1:8000")
    assert LoadConfig().url == "http://127.0.0.1:8000"


# -- parsing streams ---------------------------------------------------------------------


def _fake_stream(body: str):
    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body.encode(),
                              headers={"content-type": "text/event-stream"})

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


@pytest.mark.parametrize("api", ["native", "openai"])
def test_stream_request_parses_both_protocols(api):
    if api == "native":
        body = "".join(f"event: token\ndata: {json.dumps({'index': i, 'text': t})}\n\n"
                       for i, t in enumerate(["one", "", " two three"]))
        body += 'event: done\ndata: {"text": " four", "output_tokens": 4}\n\n'
    else:
        body = "".join(f"data: {json.dumps({'choices': [{'delta': {'content': t}}]})}\n\n"
                       for t in ["one", " two three", " four"])
        body += 'data: {"choices": [], "usage": {"completion_tokens": 4}}\n\ndata: [DONE]\n\n'
    config = LoadConfig(url="http://test", api=api)

    async def go():
        async with _fake_stream(body) as client:
            return await stream_request(client, config, "hi", SamplingParams())

    stream = asyncio.run(go())
    assert "".join(text for _, text in stream.chunks) == "one two three four"
    assert len(stream.chunks) == 3
    assert token_timeline(stream.chunks, words)[2] == 4


def test_stream_request_raises_on_error_status_error_events_and_no_event_stream():
    async def go(body, status=200, content_type="text/event-stream"):
        async def handler(request):
            return httpx.Response(status, content=body.encode(),
                                  headers={"content-type": content_type})

        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await stream_request(client, LoadConfig(url="http://t"), "hi",
                                        SamplingParams())

    with pytest.raises(ServerError, match="HTTP 422"):
        asyncio.run(go('{"detail": "bad"}', status=422, content_type="application/json"))
    with pytest.raises(ServerError, match="error event"):
        asyncio.run(go('event: error\ndata: {"detail": "boom"}\n\n'))
    # A server that answers a streamed request with one JSON body: said, not misread.
    with pytest.raises(ServerError, match="not an event stream: .*application/json"):
        asyncio.run(go('{"text": "hi"}', content_type="application/json"))


# -- against a fake OpenAI-compatible server that answers badly --------------------------


def fake_openai_app(kinds: list[str], usage: bool = True) -> FastAPI:
    """Streamed chat completions the way an OpenAI-compatible server sends them, but the
    n-th request is answered as kinds[n % len(kinds)] says: "full" (max_tokens words),
    "empty" (200 and no token, as a server that interrupts a running request does),
    "short" (half of max_tokens), "invisible" (max_tokens, the last one a special token that
    decodes to no text), or "busy" (HTTP 503). With `usage`, the server reports its count
    when the client asks for it."""
    app = FastAPI()
    arrivals = itertools.count()

    @app.post("/v1/chat/completions")
    async def chat(body: dict):
        kind = kinds[next(arrivals) % len(kinds)]
        if kind == "busy":
            return JSONResponse({"error": {"message": "busy"}}, status_code=503)
        asked = body["max_tokens"]
        generated = {"full": asked, "invisible": asked, "short": asked // 2, "empty": 0}[kind]
        shown = generated - (kind == "invisible")

        def chunk(delta: dict, finish: str | None = None) -> str:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            data = {"object": "chat.completion.chunk", "choices": [choice]}
            return f"data: {json.dumps(data)}\n\n"

        async def events():
            yield chunk({"role": "assistant", "content": ""})
            for _ in range(shown):
                await asyncio.sleep(0)
                yield chunk({"content": " word"})
            yield chunk({}, "length" if generated == asked else "stop")
            if usage and (body.get("stream_options") or {}).get("include_usage"):
                counts = {"prompt_tokens": 5, "completion_tokens": generated}
                yield f"data: {json.dumps({'choices': [], 'usage': counts})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


@contextlib.contextmanager
def fake_openai(kinds: list[str], usage: bool = True):
    with running_server(fake_openai_app(kinds, usage)) as url:
        yield url


FIXED = SamplingParams(max_new_tokens=8, ignore_eos=True)


@pytest.mark.parametrize("usage", [True, False], ids=["server-counts", "tokenizer-counts"])
def test_empty_and_short_streams_are_failures_not_goodput(usage):
    with fake_openai(["full", "empty", "invisible", "short"], usage) as url:
        config = LoadConfig(url=url, api="openai", concurrency=4, num_requests=8)
        result = run_load(config, FIXED, WordTokenizer(), ["Hi"])
    by = "server" if usage else "tokenizer"
    # With the server's count, the answer whose last token showed no text is served; by
    # the tokenizer's count of the text it looks one token short.
    expected = ({"empty answer": 2, "short answer": 2} if usage
                else {"short answer": 4, "empty answer": 2})
    assert result.errors_by_reason == expected
    assert len(result.ok) == 8 - sum(expected.values())
    assert {s.counted_by for s in result.samples} == {by}
    assert all(s.output_tokens == 8 for s in result.ok)
    assert result.request_throughput == len(result.ok) / result.duration_s
    assert result.token_throughput == 8 * len(result.ok) / result.duration_s
    empty = [s for s in result.samples if s.reason == "empty answer"]
    assert all(s.ttft_s is None and s.tokenizer_tokens == 0 for s in empty)
    short = [s for s in result.samples if s.reason == "short answer"]
    assert sorted(s.output_tokens for s in short) == ([4, 4] if usage else [4, 4, 7, 7])
    assert json.loads(json.dumps(result.to_dict()))["summary"]["errors_by_reason"] == expected


def _cli(argv: list[str]) -> int:
    return cli.main(["load", "--model", "tiny", "--api", "openai", *argv])


def test_cli_reports_a_mostly_failed_level_and_exits_1(tmp_path, capsys):
    out = tmp_path / "load.json"
    with fake_openai(["full"] + ["empty"] * 7) as url:
        code = _cli(["--url", url, "--concurrency", "1,4", "--requests", "8",
                     "--max-new-tokens", "8", "--fixed-length", "--output", str(out)])
    assert code == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("concurrency ")]
    assert [line.split(";")[0] for line in lines] == [
        f"concurrency {n}: MOSTLY FAILED: 7 of 8 requests failed (7 empty answer), 1 ok"
        for n in (1, 4)]
    assert err.rstrip().endswith(
        "llmbench load: failed: 14 of 16 requests, at concurrency 1, concurrency 4")
    levels = json.loads(out.read_text())["levels"]  # the figures are kept all the same
    assert [lv["summary"]["errors_by_reason"] for lv in levels] == [{"empty answer": 7}] * 2
    reasons = [s["reason"] for s in levels[1]["samples"]]
    assert (reasons.count("empty answer"), reasons.count(None)) == (7, 1)


def test_cli_exits_0_when_every_request_was_served(tmp_path, capsys):
    with fake_openai(["full"]) as url:
        code = _cli(["--url", url, "--concurrency", "2", "--requests", "4",
                     "--max-new-tokens", "8", "--fixed-length"])
    assert code == 0
    captured = capsys.readouterr()
    assert "concurrency 2: 4 ok, 0 errors; served" in captured.err
    assert "tokens counted by the server" in captured.err
    assert json.loads(captured.out)["levels"][0]["summary"]["num_ok"] == 4


def test_cli_server_errors_are_failures_but_no_server_is_a_usage_error(capsys):
    with fake_openai(["busy", "full"]) as url:
        assert _cli(["--url", url, "--requests", "4", "--max-new-tokens", "8"]) == 1
    assert "2 ok, 2 errors (2 HTTP 503)" in capsys.readouterr().err
    assert _cli(["--url", "http://127.0.0.1:9", "--requests", "2", "--timeout", "5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("llmbench load: error: no request was accepted at concurrency 1 ")
    assert "is a server running at http://127.0.0.1:9 with the openai API" in err
    assert "\n" not in err


# -- against a live server ---------------------------------------------------------------


@pytest.mark.parametrize("api", ["native", "openai"])
def test_run_load_against_the_live_tiny_server(live, lm, api):
    config = LoadConfig(url=live, api=api, concurrency=3, num_requests=7, model="tiny")
    params = SamplingParams(max_new_tokens=6, ignore_eos=True)
    done = []
    result = run_load(config, params, lm.tokenizer, ["Hi", "What is a cache?"],
                      progress=lambda: done.append(1))
    assert len(done) == 7 and result.num_errors == 0 and len(result.ok) == 7
    for sample in result.samples:
        assert (sample.output_tokens, sample.server_output_tokens) == (6, 6)
        assert sample.counted_by == "server"
        assert sample.tokenizer_tokens >= 1
        assert len(sample.itl_s) == sample.tokenizer_tokens - 1
        assert 0 < sample.ttft_s <= sample.latency_s
        # Only the native `done` event carries the server's own decode pace.
        assert (sample.server_decode_s is not None) == (api == "native")
    assert result.summary()["ttft_ms"]["p99"] >= result.summary()["ttft_ms"]["p50"]
    assert (result.serving_overhead is not None) == (api == "native")


def test_unreachable_server_counts_errors(lm):
    config = LoadConfig(url="http://127.0.0.1:9", num_requests=2, timeout_s=5)
    result = run_load(config, SamplingParams(max_new_tokens=2), lm.tokenizer, ["Hi"])
    assert result.num_errors == 2 and not result.ok
    assert result.errors_by_reason == {"connection error": 2}


def test_complete_once_on_a_native_server(live):
    reply = complete_once(LoadConfig(url=live), "Hello",
                          SamplingParams(max_new_tokens=3, ignore_eos=True))
    assert reply["output_tokens"] == 3 and reply["input_tokens"] > 0
    assert isinstance(reply["text"], str)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    cli_server.register(commands)
    cli_load.register(commands)
    return parser.parse_args(argv)


def test_cli_defaults_come_from_the_settings():
    serve = _parse(["serve"])
    assert (serve.host, serve.port, serve.max_batch_size) == ("127.0.0.1", 8000, 16)
    load = _parse(["load", "--concurrency", "1,4,16"])
    assert load.concurrency == [1, 4, 16] and load.url == "http://127.0.0.1:8000"
    assert load.max_new_tokens == SamplingParams().max_new_tokens
    with pytest.raises(SystemExit):
        _parse(["load", "--concurrency", "0,2"])


def test_cli_load_writes_json_and_never_overwrites(live, tmp_path, capsys):
    out = tmp_path / "load.json"
    argv = ["load", "--url", live, "--model", "tiny", "--concurrency", "1,2", "--requests",
            "2", "--max-new-tokens", "3", "--fixed-length", "--output", str(out)]
    args = _parse(argv)
    assert args.func(args) == 0
    levels = json.loads(out.read_text())["levels"]
    assert [lv["summary"]["concurrency"] for lv in levels] == [1, 2]
    assert all(lv["summary"]["num_errors"] == 0 for lv in levels)
    assert "concurrency 2: 2 ok" in capsys.readouterr().err
    with pytest.raises(UserError, match="exists"):
        args.func(_parse(argv))
