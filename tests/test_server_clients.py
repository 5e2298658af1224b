"""Clients written for other small inference servers work against `llmbench serve` as they
are: each test sends exactly one such client's request over real HTTP and reads exactly what
that client reads."""

import json
import math

import httpx
import pytest
from pydantic import BaseModel

from llmbench.serve.app import ServerSettings, create_app, running_server


@pytest.fixture(scope="module")
def url(tiny_lm):
    """A real uvicorn server with the default settings (token cap 256) on a loopback port."""
    app = create_app(tiny_lm, ServerSettings())
    with running_server(app) as base:
        yield base


def test_max_output_tokens_client_reads_latency_s_and_tokens_per_second(url):
    # A client whose server calls the token limit `max_output_tokens` and caps it at 256.
    response = httpx.post(url + "/generate", json={"prompt": "What is AI?",
                                                   "max_output_tokens": 12}, timeout=60)
    assert response.status_code == 200
    body = response.json()
    latency_s, output_tokens = body["latency_s"], body["output_tokens"]
    assert isinstance(latency_s, float) and latency_s > 0
    assert isinstance(output_tokens, int) and 1 <= output_tokens <= 12
    assert math.isclose(body["tokens_per_second"], output_tokens / latency_s)
    assert math.isclose(latency_s * 1e3, body["latency_ms"])

    refused = httpx.post(url + "/generate", json={"prompt": "What is AI?",
                                                  "max_output_tokens": 300}, timeout=60)
    assert refused.status_code == 422
    [error] = refused.json()["detail"]
    assert error["loc"] == ["body", "max_output_tokens"]
    assert "less than or equal to 256" in error["msg"]


def test_health_checking_client_gets_a_completion_and_a_refusal(url):
    # A client that checks health, asks for a fixed number of new tokens, and expects an
    # oversized request to be refused.
    with httpx.Client(base_url=url, timeout=60) as http:
        health = http.get("/health")
        assert health.status_code == 200 and health.json()["status"] == "ok"
        completion = http.post("/generate", json={"prompt": "Gravity is",
                                                  "max_new_tokens": 16})
        assert completion.status_code == 200
        body = completion.json()
        assert isinstance(body["text"], str) and 1 <= body["output_tokens"] <= 16
        oversized = http.post("/generate", json={"prompt": "Gravity is",
                                                 "max_new_tokens": 100_000})
        assert oversized.status_code == 422
        assert oversized.json()["detail"][0]["loc"] == ["body", "max_new_tokens"]


class _Timing(BaseModel):
    latency_ms: float
    ttft_ms: float


class _TimedReply(BaseModel):
    """What a client with a response model reads from /generate."""

    text: str
    timing: _Timing
    token_count: int
    throughput: float
    cache_usage: str


TOKEN_LIMIT_REQUEST = {"prompt": "Tell me about the moon.", "token_limit": 10,
                       "temperature": 0.0, "top_k": None}


def test_token_limit_client_parses_its_response_model(url):
    response = httpx.post(url + "/generate", json=TOKEN_LIMIT_REQUEST, timeout=60)
    assert response.status_code == 200, response.text
    reply = _TimedReply.model_validate(response.json())
    body = response.json()
    assert reply.text == body["text"]
    assert 0 < reply.timing.ttft_ms <= reply.timing.latency_ms == body["latency_ms"]
    assert reply.token_count == body["output_tokens"] <= 10
    assert reply.throughput == body["tokens_per_second"] > 0
    assert reply.cache_usage == "true"
    sampled = httpx.post(url + "/generate", json={**TOKEN_LIMIT_REQUEST, "temperature": 0.7},
                         timeout=60)
    assert sampled.status_code == 200
    _TimedReply.model_validate(sampled.json())


def test_token_limit_client_reads_the_stream_as_data_lines(url):
    # An SSE client that reads each `data:` line as JSON and ignores the `event:` names.
    events = []
    with httpx.stream("POST", url + "/stream", json=TOKEN_LIMIT_REQUEST, timeout=60) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        for line in reply.iter_lines():
            if line.startswith("data:"):
                events.append(json.loads(line.removeprefix("data:").strip()))
    *tokens, done = events
    whole = httpx.post(url + "/generate", json=TOKEN_LIMIT_REQUEST, timeout=60).json()
    assert "".join(e["text"] for e in tokens) + done["text"] == whole["text"]
    assert [e["token_id"] for e in tokens] == whole["token_ids"]
    reply = _TimedReply.model_validate(done | {"text": whole["text"]})
    assert reply.token_count == len(tokens) and reply.cache_usage == "true"
