"""Inputs at the edges of what the server accepts: bodies that are not JSON, streams and
caches, HEAD, and a port that is already taken."""

import os
import socket
import subprocess
import sys

import httpx
import pytest
from fastapi.testclient import TestClient

from llmbench.errors import EXIT_USAGE
from llmbench.server import ServerSettings, create_app, running_server

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
    assert proc.returncode == EXIT_USAGE
    assert proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert line == (f"llmbench serve: error: port {port} on 127.0.0.1 is already in use: "
                    "stop what is listening there, or pass another --port (0 picks a free "
                    "one)")
