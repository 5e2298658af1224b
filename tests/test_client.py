"""The load client: token counting and per-token ITL on hand-made streams, SSE parsing of
both protocols, summaries, the CLI, and a run against a live tiny server."""

import argparse
import asyncio
import json

import httpx
import pytest

from llmbench.cli import server as cli_server
from llmbench.engine.config import EngineConfig, SamplingParams
from llmbench.engine.models import load_model
from llmbench.errors import UserError
from llmbench.serve.app import ServerSettings, create_app, running_server
from llmbench.serve.client import (
    LoadConfig,
    LoadResult,
    RequestSample,
    generate_once,
    run_load,
    stream_request,
    token_timeline,
)
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
                                  output_tokens=3) for s in (1.0, 2.0, 3.0, 4.0))
    result = LoadResult(config, SamplingParams(), duration_s=2.0,
                        samples=samples + (RequestSample(0.0, error="HTTP 503: busy"),))
    summary = result.summary()
    assert summary["latency_ms"] == pytest.approx(
        {"mean": 2500.0, "p50": 2500.0, "p90": 3700.0, "p99": 3970.0})
    assert summary["itl_ms"]["p50"] == pytest.approx(20.0)
    assert summary["tpot_ms"]["mean"] == pytest.approx(1000 * (2.5 - 0.25) / 2)
    assert (summary["num_ok"], summary["num_errors"], summary["errors"]) == (
        4, 1, ["HTTP 503: busy"])
    assert result.token_throughput == 6.0 and result.request_throughput == 2.0
    json.dumps(result.to_dict())


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


def test_stream_request_raises_on_error_status_and_error_events():
    async def go(body, status=200):
        async def handler(request):
            return httpx.Response(status, content=body.encode())

        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await stream_request(client, LoadConfig(url="http://t"), "hi",
                                        SamplingParams())

    with pytest.raises(Exception, match="HTTP 422"):
        asyncio.run(go('{"detail": "bad"}', status=422))
    with pytest.raises(Exception, match="error event"):
        asyncio.run(go('event: error\ndata: {"detail": "boom"}\n\n'))


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
        assert sample.server_output_tokens == 6
        assert sample.output_tokens >= 1 and len(sample.itl_s) == sample.output_tokens - 1
        assert 0 < sample.ttft_s <= sample.latency_s
    assert result.summary()["ttft_ms"]["p99"] >= result.summary()["ttft_ms"]["p50"]


def test_unreachable_server_counts_errors(lm):
    config = LoadConfig(url="http://127.0.0.1:9", num_requests=2, timeout_s=5)
    result = run_load(config, SamplingParams(max_new_tokens=2), lm.tokenizer, ["Hi"])
    assert result.num_errors == 2 and not result.ok


def test_generate_once(live):
    body = generate_once(live, "Hello", SamplingParams(max_new_tokens=3, ignore_eos=True))
    assert body["output_tokens"] == 3 and len(body["token_ids"]) == 3


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli_server.register(parser.add_subparsers(dest="command", required=True))
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
