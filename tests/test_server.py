"""The HTTP server: validation errors, SSE framing, the official `openai` client against a
real uvicorn server, batched equality over HTTP, disconnects, and a no-500 fuzz."""

import asyncio
import json
import statistics
import time

import httpx
import openai
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmbench.engine.config import EngineConfig, SamplingParams
from llmbench.engine.loop import generate
from llmbench.engine.models import load_model
from llmbench.engine.prompts import encode
from llmbench.errors import UserError
from llmbench.serve.app import ServerSettings, create_app, running_server
from llmbench.serve.scheduler import SchedulerFull
from llmbench.serve.streaming import IncrementalDetokenizer

CAP = 8  # max_new_tokens cap of the in-process app: keeps valid fuzz requests short
BODY_LIMIT = 100_000


@pytest.fixture(scope="module")
def lm():
    """The tiny random model (real tokenizer, context 8192)."""
    return load_model(EngineConfig(model="tiny", device="cpu"))


@pytest.fixture(scope="module")
def client(lm):
    """An in-process app with a small cap and body limit, for validation and framing."""
    app = create_app(lm, ServerSettings(max_new_tokens_cap=CAP, max_body_bytes=BODY_LIMIT))
    yield TestClient(app)
    app.state.scheduler.close()


@pytest.fixture(scope="module")
def live(lm):
    """A real uvicorn server on a free loopback port, with room for long generations."""
    app = create_app(lm, ServerSettings(max_new_tokens_cap=4096, max_batch_size=16))
    with running_server(app) as url:
        yield url, app.state.scheduler


def _frames(body: str) -> list[dict]:
    """Split an SSE body into frames of {field: value}; every frame ends with a blank line."""
    assert body.endswith("\n\n")
    frames = []
    for block in body[:-2].split("\n\n"):
        frame = {}
        for line in block.split("\n"):
            key, _, value = line.partition(": ")
            assert key in ("event", "data") and key not in frame, line
            frame[key] = value
        frames.append(frame)
    return frames


# -- validation -------------------------------------------------------------------------

INVALID = [
    ({"max_new_tokens": 0}, "max_new_tokens", "greater than or equal to 1"),
    ({"max_new_tokens": CAP + 1}, "max_new_tokens", f"less than or equal to {CAP}"),
    ({"max_new_tokens": "4"}, "max_new_tokens", "valid integer"),
    ({"temperature": -0.5}, "temperature", "greater than or equal to 0"),
    ({"temperature": 1e-9}, "temperature", "0 (greedy) or at least"),
    ({"top_k": -1}, "top_k", "greater than or equal to 0"),
    ({"top_p": 0}, "top_p", "greater than 0"),
    ({"top_p": 1.5}, "top_p", "less than or equal to 1"),
    ({"seed": -1}, "seed", "greater than or equal to 0"),
    ({"seed": 2**64}, "seed", "less than or equal to"),
    ({"chat": "yes"}, "chat", "valid boolean"),
    ({"prompt": ""}, "prompt", "at least 1 character"),
    ({"prompt": 42}, "prompt", "valid string"),
    ({"bogus": 1}, "bogus", "Extra inputs are not permitted"),
]


@pytest.mark.parametrize("route", ["/generate", "/stream"])
@pytest.mark.parametrize(("change", "field", "reason"), INVALID,
                         ids=[f"{c[1]}={list(c[0].values())[0]!r}" for c in INVALID])
def test_invalid_fields_are_422_naming_field_and_reason(client, route, change, field, reason):
    response = client.post(route, json={"prompt": "hi", **change})
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", field]
    assert reason in error["msg"]


def test_missing_prompt_nan_and_malformed_json_are_422(client):
    assert client.post("/generate", json={}).json()["detail"][0]["loc"] == ["body", "prompt"]
    nan = client.post("/generate", content=b'{"prompt": "hi", "temperature": NaN}',
                      headers={"content-type": "application/json"})
    assert nan.status_code == 422 and nan.json()["detail"][0]["loc"] == ["body", "temperature"]
    broken = client.post("/generate", content=b'{"prompt": ',
                         headers={"content-type": "application/json"})
    assert broken.status_code == 422 and broken.json()["detail"][0]["type"] == "json_invalid"


def test_prompt_longer_than_the_context_is_422_stating_the_limit(client):
    response = client.post("/generate", json={"prompt": "hello " * 9000})
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "prompt"]
    assert "exceeds the model's context of 8192 tokens" in error["msg"]


def test_oversized_body_is_413_declared_or_streamed(client):
    body = json.dumps({"prompt": "x" * BODY_LIMIT}).encode()
    declared = client.post("/generate", content=body,
                           headers={"content-type": "application/json"})
    assert declared.status_code == 413
    assert str(BODY_LIMIT) in declared.json()["detail"]
    chunked = client.post("/generate", content=iter([body[:60_000], body[60_000:]]),
                          headers={"content-type": "application/json"})
    assert chunked.status_code == 413


def test_unknown_route_is_404_and_wrong_method_405(client):
    assert client.post("/v1/embeddings", json={}).status_code == 404
    assert client.get("/nope").status_code == 404
    assert client.get("/generate").status_code == 405


def test_openai_routes_reject_unsupported_parameters(client):
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    for change, field in [({"stop": ["\n"]}, "stop"), ({"n": 2}, "n"),
                          ({"logprobs": True}, "logprobs"), ({"max_tokens": CAP + 1}, "max_tokens"),
                          ({"messages": []}, "messages"), ({"stream_options": {"x": 1}}, "x")]:
        response = client.post("/v1/chat/completions", json={**chat, **change})
        assert response.status_code == 400, change
        assert response.json()["error"]["param"].split(".")[-1] == field
    neutral = {"stop": None, "n": 1, "user": "someone", "model": "tiny", "max_tokens": 2}
    assert client.post("/v1/chat/completions", json={**chat, **neutral}).status_code == 200
    empty = client.post("/v1/completions", json={"prompt": "", "max_tokens": 2})
    assert empty.status_code == 400 and "prompt is empty" in empty.json()["error"]["message"]


def test_openai_null_means_default_and_a_full_queue_is_503(client, monkeypatch):
    nulls = {"temperature": None, "top_p": None, "seed": None, "max_tokens": None,
             "stream": None, "stream_options": None}
    response = client.post("/v1/completions", json={"prompt": "Hi", **nulls})
    assert response.status_code == 200
    assert response.json()["usage"]["completion_tokens"] <= min(SamplingParams().max_new_tokens,
                                                                CAP)

    def full(*args, **kwargs):
        raise SchedulerFull("256 requests are already waiting")

    monkeypatch.setattr(client.app.state.scheduler, "submit", full)
    busy = client.post("/generate", json={"prompt": "Hi"})
    assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
    assert "retry later" in busy.json()["detail"]


def test_settings_are_validated():
    with pytest.raises(UserError, match="max_batch_size"):
        ServerSettings(max_batch_size=0)
    with pytest.raises(UserError, match="--port"):
        ServerSettings(port=70000)


# -- responses and framing --------------------------------------------------------------


def test_generate_equals_the_engine_and_reports_timings(client, lm):
    body = client.post("/generate", json={"prompt": "What is 2+2?", "max_new_tokens": 6,
                                          "ignore_eos": True}).json()
    expected = generate(lm, encode(lm.tokenizer, "What is 2+2?", chat=True),
                        SamplingParams(max_new_tokens=6, ignore_eos=True))
    assert tuple(body["token_ids"]) == expected.token_ids
    assert body["text"] == expected.text
    assert (body["input_tokens"], body["output_tokens"], body["finish_reason"]) == (
        expected.input_tokens, 6, "length")
    assert 0 < body["ttft_ms"] <= body["latency_ms"] and body["tokens_per_second"] > 0
    assert 0 < body["decode_ms_per_token"] < body["latency_ms"]
    one = client.post("/generate", json={"prompt": "Hi", "max_new_tokens": 1}).json()
    assert one["output_tokens"] == 1 and one["decode_ms_per_token"] is None  # no gap to time


def test_stream_frames_one_event_per_token_then_done(client):
    request = {"prompt": "Count to ten.", "max_new_tokens": 7, "ignore_eos": True}
    response = client.post("/stream", json=request)
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = _frames(response.text)
    tokens, done = frames[:-1], frames[-1]
    assert [f["event"] for f in tokens] == ["token"] * 7 and done["event"] == "done"
    data = [json.loads(f["data"]) for f in tokens]
    assert [d["index"] for d in data] == list(range(7))
    times = [d["time_ms"] for d in data]
    assert times == sorted(times)
    metrics = json.loads(done["data"])
    assert metrics["output_tokens"] == 7 and metrics["finish_reason"] == "length"
    assert metrics["ttft_ms"] == times[0]
    # The server's own pace: the median gap between the token times it streamed.
    assert metrics["decode_ms_per_token"] == pytest.approx(
        statistics.median(b - a for a, b in zip(times, times[1:], strict=False)), rel=1e-6)
    whole = client.post("/generate", json=request).json()
    assert "".join(d["text"] for d in data) + metrics["text"] == whole["text"]
    assert [d["token_id"] for d in data] == whole["token_ids"]


def test_openai_stream_frames_end_with_usage_and_done(client):
    response = client.post("/v1/completions", json={
        "prompt": "Once upon a time", "max_tokens": 5, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True}})
    frames = _frames(response.text)
    assert all(set(f) == {"data"} for f in frames)
    assert frames[-1]["data"] == "[DONE]"
    chunks = [json.loads(f["data"]) for f in frames[:-1]]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 5
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert all(c["usage"] is None for c in chunks[:-1])
    assert {c["object"] for c in chunks} == {"text_completion"}


def test_detokenizer_deltas_add_up_for_multibyte_and_merged_tokens(lm):
    text = "héllo 世界 🎉 naïve ﷽ done"
    ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
    detok = IncrementalDetokenizer(lm.tokenizer)
    deltas = [detok.push(i) for i in ids]
    assert "\ufffd" not in "".join(deltas)
    assert "" in deltas  # bytes of one character spread over tokens are held back
    assert "".join(deltas) + detok.flush() == text


def test_health_and_openapi(client, lm):
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["model"] == "tiny"
    assert health["device"] == str(lm.device) and health["fingerprint"] == lm.fingerprint
    spec = client.get("/openapi.json").json()
    assert {"/generate", "/stream", "/v1/completions", "/v1/chat/completions",
            "/health"} <= set(spec["paths"])


# -- a real server ----------------------------------------------------------------------


def test_openai_client_round_trip(live, lm):
    url, _ = live
    api = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    extra = {"ignore_eos": True}
    native = httpx.post(url + "/generate", json={"prompt": "Hi there", "max_new_tokens": 6,
                                                 "ignore_eos": True}).json()
    raw = httpx.post(url + "/generate", json={"prompt": "Hi there", "max_new_tokens": 6,
                                              "ignore_eos": True, "chat": False}).json()

    completion = api.completions.create(model="tiny", prompt="Hi there", max_tokens=6,
                                        extra_body=extra)
    assert completion.choices[0].text == raw["text"]
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 6
    assert completion.usage.prompt_tokens == raw["input_tokens"]

    chat = api.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hi there"}], max_tokens=6,
        extra_body=extra)
    assert chat.choices[0].message.content == native["text"]
    assert chat.usage.total_tokens == native["input_tokens"] + 6

    chunks = list(api.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hi there"}],
        max_completion_tokens=6, stream=True, stream_options={"include_usage": True},
        extra_body=extra))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == \
        native["text"]
    assert chunks[-1].usage.completion_tokens == 6

    chunks = list(api.completions.create(model="tiny", prompt="Hi there", max_tokens=6,
                                         stream=True, extra_body=extra))
    assert "".join(c.choices[0].text for c in chunks) == raw["text"]
    assert chunks[-1].choices[0].finish_reason == "length"
    assert [m.id for m in api.models.list()] == ["tiny"]


def test_sixteen_concurrent_http_requests_equal_each_served_alone(live, lm):
    url, scheduler = live
    requests = [{"prompt": f"Request {i}: " + "tell me more " * (i % 5), "chat": i % 2 == 0,
                 "max_new_tokens": 4 + (3 * i) % 13, "ignore_eos": True} for i in range(16)]
    expected = [generate(lm, encode(lm.tokenizer, r["prompt"], chat=r["chat"]),
                         SamplingParams(max_new_tokens=r["max_new_tokens"], ignore_eos=True))
                for r in requests]
    peak_before = scheduler.stats.peak_batch_size

    async def send_all():
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            return await asyncio.gather(*(http.post("/generate", json=r) for r in requests))

    scheduler.stats.peak_batch_size = 0
    responses = asyncio.run(send_all())
    assert [r.status_code for r in responses] == [200] * 16
    for response, result in zip(responses, expected, strict=True):
        assert tuple(response.json()["token_ids"]) == result.token_ids
        assert response.json()["text"] == result.text
    assert scheduler.stats.peak_batch_size > 1, "requests were served one at a time"
    scheduler.stats.peak_batch_size = max(peak_before, scheduler.stats.peak_batch_size)


def test_client_disconnect_mid_stream_frees_its_slot(live):
    url, scheduler = live
    cancelled = scheduler.stats.num_cancelled
    with httpx.Client(base_url=url, timeout=60) as http:
        body = {"prompt": "Write a very long essay.", "max_new_tokens": 4000, "ignore_eos": True}
        with http.stream("POST", "/stream", json=body) as response:
            events = 0
            for line in response.iter_lines():
                events += line.startswith("event: token")
                if events == 2:
                    break
        deadline = time.monotonic() + 60
        while scheduler.stats.num_cancelled == cancelled or scheduler.num_active:
            assert time.monotonic() < deadline, "the disconnected request kept its slot"
            time.sleep(0.02)
        after = http.post("/generate", json={"prompt": "still there?", "max_new_tokens": 3})
    assert after.status_code == 200 and after.json()["output_tokens"] <= 3


# -- fuzz -------------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                               max_size=3),
    max_leaves=6)
_sampling = {
    "max_new_tokens": st.integers(-2, CAP + 2) | _json, "max_tokens": st.integers(-2, CAP + 2),
    "temperature": st.floats(-1, 3) | _json, "top_k": st.integers(-3, 70000) | _json,
    "top_p": st.floats(-0.5, 1.5) | _json, "seed": st.integers(-5, 2**65) | _json,
    "ignore_eos": st.booleans() | _json, "chat": st.booleans() | _json,
    "stream": st.booleans() | _json, "stream_options": st.fixed_dictionaries(
        {}, optional={"include_usage": st.booleans()}) | _json,
    "stop": _json, "n": st.integers(0, 3), "model": st.text(max_size=8) | _json,
}
_message = st.fixed_dictionaries({}, optional={
    "role": st.sampled_from(["user", "system", "assistant", "tool", "x"]) | _json,
    "content": st.text(max_size=30) | st.lists(st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image_url"]), "text": st.text(max_size=10)})) | _json})
_body = st.fixed_dictionaries({}, optional={
    **_sampling, "prompt": st.text(max_size=40) | st.lists(st.text(max_size=10), max_size=2)
    | _json, "messages": st.lists(_message, max_size=3) | _json,
    "extra": _json}) | _json
_route = st.sampled_from(["/generate", "/stream", "/v1/completions", "/v1/chat/completions"])


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(route=_route, body=_body, raw=st.none() | st.binary(max_size=40))
def test_fuzzed_requests_never_get_a_500(client, route, body, raw):
    content = raw if raw is not None else json.dumps(body).encode()  # NaN/Infinity included
    response = client.post(route, content=content, headers={"content-type": "application/json"})
    assert response.status_code < 500, (response.status_code, response.text[:300])
    # 400: a body that is not UTF-8 at all (FastAPI: "error parsing the body"), or any
    # invalid input on /v1; 404: a `model` other than the served one.
    assert response.status_code in (200, 400, 404, 413, 422), response.text[:300]
    if response.status_code == 404:
        assert response.json()["error"]["code"] == "model_not_found"
