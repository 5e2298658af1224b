"""Inputs at the edges of what the server accepts: field names and nulls on the native
routes, bodies that are not JSON, a top_p below float32's range, streams and caches, HEAD,
and a port that is already taken."""

import os
import socket
import subprocess
import sys

import httpx
import pytest
from fastapi.testclient import TestClient

from llmbench.errors import Exit
from llmbench.serve.app import ServerSettings, create_app, running_server

CAP = 8
PROMPT = {"prompt": "Say something.", "ignore_eos": True}


@pytest.fixture(scope="module")
def app(tiny_lm):
    app = create_app(tiny_lm, ServerSettings(max_new_tokens_cap=CAP))
    yield app
    app.state.scheduler.close()


@pytest.fixture(scope="module")
def client(app):
    """The app in-process: enough for validation and headers."""
    return TestClient(app)


@pytest.mark.parametrize("name", ["max_new_tokens", "max_output_tokens", "token_limit"])
def test_each_name_of_the_token_limit_is_honoured(client, name):
    body = client.post("/generate", json={**PROMPT, name: 3}).json()
    assert body["output_tokens"] == 3
    refused = client.post("/generate", json={**PROMPT, name: CAP + 1})
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", name]


def test_two_names_of_the_token_limit_at_once_are_refused(client):
    for names in (["max_new_tokens", "token_limit"], ["max_output_tokens", "token_limit"]):
        response = client.post("/generate", json={**PROMPT, **dict.fromkeys(names, 3)})
        assert response.status_code == 422
        [error] = response.json()["detail"]
        assert error["loc"] == ["body"]
        assert f"{' and '.join(names)} are names of the same field (max_new_tokens)" in \
            error["msg"]


def test_null_for_an_optional_native_field_means_its_default(client):
    fields = ["temperature", "top_k", "top_p", "seed", "ignore_eos", "max_new_tokens", "chat"]
    plain = client.post("/generate", json={"prompt": "Say something."}).json()
    for route in ("/generate", "/stream"):
        response = client.post(route, json={"prompt": "Say something.",
                                            **dict.fromkeys(fields)})
        assert response.status_code == 200, (route, response.text)
    nulled = client.post("/generate", json={"prompt": "Say something.",
                                            **dict.fromkeys(fields)}).json()
    assert nulled["token_ids"] == plain["token_ids"]
    assert client.post("/generate", json={"prompt": None}).status_code == 422


def test_a_body_not_sent_as_json_says_so(client):
    for headers, content in [({"content-type": "application/x-www-form-urlencoded"},
                              b'{"prompt":"hi"}'),
                             ({"content-type": "text/plain"}, b'{"prompt":"hi"}')]:
        response = client.post("/generate", content=content, headers=headers)
        assert response.status_code == 422
        [error] = response.json()["detail"]
        assert error["loc"] == ["body"] and error["type"] == "content_type"
        assert "Content-Type: application/json" in error["msg"]
        assert headers["content-type"] in error["msg"]
    vendor_json = client.post("/generate", content=b'{"prompt":"hi","max_new_tokens":1}',
                              headers={"content-type": "application/vnd.api+json"})
    assert vendor_json.status_code == 200


@pytest.mark.parametrize(("route", "body", "output"), [
    ("/generate", {"prompt": "hi", "max_new_tokens": 4}, lambda r: r["token_ids"]),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 4}, lambda r: r["choices"]),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                              "max_tokens": 4}, lambda r: r["choices"]),
])
def test_a_top_p_below_float32_samples_the_best_token(client, route, body, output):
    # 1e-300 is a valid top_p that float32 rounds to 0: only the best token may remain.
    sampled = client.post(route, json={**body, "temperature": 1, "top_p": 1e-300})
    assert sampled.status_code == 200, sampled.text
    assert output(sampled.json()) == output(client.post(route, json=body).json())


def test_streams_are_not_cached(client):
    streams = [client.post("/stream", json={**PROMPT, "max_new_tokens": 2}),
               client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2,
                                                    "stream": True}),
               client.post("/v1/chat/completions", json={
                   "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                   "stream": True})]
    for response in streams:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"


def test_head_health_is_get_without_a_body(app):
    with running_server(app) as url:
        assert httpx.get(url + "/health").status_code == 200
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(b"HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            raw = b""
            while chunk := sock.recv(65536):
                raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert body == b""


def test_serve_on_a_taken_port_is_one_line_and_exit_2():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        proc = subprocess.run([sys.executable, "-m", "llmbench", "serve", "--model", "tiny",
                               "--port", str(port)], capture_output=True, text=True, env=env,
                              timeout=300)
    assert proc.returncode == Exit.USAGE
    assert proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert line == (f"llmbench serve: error: port {port} on 127.0.0.1 is already in use: "
                    "stop what is listening there, or pass another --port (0 picks a free "
                    "one)")
