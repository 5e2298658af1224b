"""The inference server: a FastAPI app over the continuous-batching scheduler.

Routes: `POST /generate` (one JSON answer with timings), `POST /stream` (Server-Sent Events,
one `token` event per token, then a `done` event with the metrics), the OpenAI-compatible
`POST /v1/completions` and `POST /v1/chat/completions` (plain or streamed, `data: [DONE]`
last), `GET /v1/models`, `GET`/`HEAD /health`, and FastAPI's `/openapi.json` and `/docs`.
Streams are sent with `Cache-Control: no-cache`.

Native requests may name the token limit `max_new_tokens`, `max_output_tokens` or
`token_limit` (one of them), and the answer gives some metrics under two names as well
(`latency_s`, `timing`, `token_count`, `throughput`, `cache_usage`), so that clients written
for other small servers work as they are. On every route `null` for an optional field means
"use the default". Sampling defaults come from `SamplingParams` on every route, so the
OpenAI routes are greedy unless `temperature` is given (OpenAI's own default is 1).

OpenAI routes: `model` must be the served model's name (the one `/v1/models` lists) or
absent; `/v1/completions` takes text or token ids. `top_k` and `ignore_eos` are accepted as
extensions, as vLLM does (the `openai` client sends them with `extra_body`). `user`,
`store`, `metadata`, `parallel_tool_calls` and `service_tier` are accepted and ignored.
Parameters that would change the work done (`stop`, `n` > 1, `logprobs`, penalties, ...)
are refused unless neutral rather than silently ignored; unknown fields are refused too.

Errors (see `http_errors`): natively, invalid input -> 422 with `detail: [{loc, msg, type}]`
naming the field; on `/v1/...`, invalid input -> 400 and every other refusal in OpenAI's
shape `{"error": {message, type, param, code}}`, an unknown model -> 404 `model_not_found`.
Invalid input includes a body that is not JSON (or not sent as `application/json`) and a
prompt that does not fit the context. A body over `max_body_bytes` -> 413; a body that is
not UTF-8 -> 400 (FastAPI's); a full queue -> 503; unknown route -> 404. A client that
disconnects cancels its request, which leaves the batch at the next step.
"""

import asyncio
import contextlib
import errno
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator

from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from starlette.requests import Request as HTTPRequest

from llmbench import __version__
from llmbench.engine.loop import TokenEvent
from llmbench.engine.models import LoadedModel
from llmbench.engine.prompts import encode
from llmbench.errors import UserError
from llmbench.serve import http_errors, openai_api, openapi_spec
from llmbench.serve.generations import Generations, failure
from llmbench.serve.request import Outcome, Request
from llmbench.serve.scheduler import Scheduler
from llmbench.serve.schemas import GenerateResponse, request_models, with_other_names
from llmbench.serve.settings import ServerSettings
from llmbench.serve.streaming import event_stream, sse


def create_app(lm: LoadedModel, settings: ServerSettings) -> FastAPI:
    """The app for `lm`; its scheduler (`app.state.scheduler`) starts on the first request
    or at startup, and stops at shutdown."""
    scheduler = Scheduler(lm, settings.max_batch_size, settings.max_waiting,
                          settings.max_context)
    generations = Generations(lm, scheduler)
    schemas = request_models(settings.max_new_tokens_cap)
    GenerateRequest = schemas["generate"]  # noqa: N806 - a class

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await asyncio.to_thread(scheduler.start)  # warm up before the first request
        yield
        await asyncio.to_thread(scheduler.close)

    app = FastAPI(title="llmbench serve", version=__version__, lifespan=lifespan,
                  description=__doc__)
    app.state.scheduler, app.state.lm, app.state.settings = scheduler, lm, settings
    http_errors.install(app, settings.max_body_bytes)

    def metrics(request: Request, outcome: Outcome, first: TokenEvent | None,
                received: float) -> dict:
        offset = request.submitted_at - received  # report times from the request's arrival
        latency = outcome.latency_s + offset
        return with_other_names({
            "input_tokens": outcome.input_tokens, "output_tokens": outcome.output_tokens,
            "ttft_ms": 1e3 * (first.time_s + offset) if first else None,
            "latency_ms": 1e3 * latency,
            "tokens_per_second": outcome.output_tokens / latency if latency > 0 else 0.0,
            "decode_ms_per_token": request.decode_ms_per_token,
            "finish_reason": outcome.finish_reason})

    @app.head("/health")
    @app.get("/health")
    async def health() -> dict:
        """Liveness, and what is being served (HEAD: the status alone)."""
        return {"status": "ok", "model": lm.name, "fingerprint": lm.fingerprint,
                "device": str(lm.device), "dtype": str(lm.dtype).removeprefix("torch."),
                "kv_cache": lm.kv_cache, "compiled": lm.compiled_decoder is not None,
                "max_batch_size": settings.max_batch_size, "active": scheduler.num_active,
                "waiting": scheduler.num_waiting}

    @app.post("/generate", response_model=GenerateResponse)
    async def generate(body: GenerateRequest, http: HTTPRequest):
        """Generate and answer once with the text and timings."""
        received = time.perf_counter()
        ids = encode(lm.tokenizer, body.prompt, chat=body.chat and lm.is_chat)
        request = generations.submit(ids, body.params(body.max_new_tokens), ["body", "prompt"])
        tokens: list[TokenEvent] = []
        text = ""
        async for item, delta in generations.run(http, request):
            text += delta
            if isinstance(item, TokenEvent):
                tokens.append(item)
        outcome = request.outcome
        if outcome.is_failure:
            raise failure(outcome)
        return {"text": text, "token_ids": [t.token_id for t in tokens],
                **metrics(request, outcome, tokens[0], received)}

    @app.post("/stream", response_class=StreamingResponse,
              responses={200: {"content": {"text/event-stream": {}}}})
    async def stream(body: GenerateRequest, http: HTTPRequest):
        """Server-Sent Events: `token` {index, token_id, text, time_ms} per token, then
        `done` with the metrics and any final text, or `error`."""
        received = time.perf_counter()
        ids = encode(lm.tokenizer, body.prompt, chat=body.chat and lm.is_chat)
        request = generations.submit(ids, body.params(body.max_new_tokens), ["body", "prompt"])

        async def events() -> AsyncIterator[str]:
            first = None
            async for item, delta in generations.run(http, request):
                if isinstance(item, TokenEvent):
                    first = first or item
                    elapsed = item.time_s + request.submitted_at - received
                    yield sse({"index": item.index, "token_id": item.token_id, "text": delta,
                               "time_ms": 1e3 * elapsed}, "token")
                elif item.is_failure:
                    yield sse({"detail": item.error or "cancelled"}, "error")
                else:
                    yield sse({"text": delta, **metrics(request, item, first, received)}, "done")

        return event_stream(events(), request)

    openai_api.register(app, generations, schemas)
    openapi_spec.publish_as_enforced(app, [*schemas.values(), GenerateResponse])
    return app


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket listening on host:port (port 0 picks a free one), or a `UserError` saying
    why not: taken before the model loads, so that a busy port fails at once."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as exc:
        raise UserError(f"cannot resolve --host {host!r} ({exc.strerror}): pass an address "
                        "such as 127.0.0.1") from None
    # proto=IPPROTO_TCP, not 0: asyncio only disables Nagle on sockets that say they are
    # TCP, and with Nagle each streamed token waits for the client's delayed ACK (~40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen()  # holds the port: two sockets may bind one port until one listens
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UserError(f"port {port} on {host} is already in use: stop what is "
                            "listening there, or pass another --port (0 picks a free one)"
                            ) from None
        raise UserError(f"cannot listen on {host}:{port} ({exc.strerror}): pass another "
                        "--host or --port") from None
    return sock


def uvicorn_server(app: FastAPI):
    """A uvicorn server for `app`, not started: `.run(sockets=[...])` serves until stopped."""
    import uvicorn

    return uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5))


@contextlib.contextmanager
def running_server(app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve `app` with uvicorn on a background thread; yields the base URL (port 0 picks a
    free port) and shuts the server down on exit."""
    sock = listening_socket(host, port)
    server = uvicorn_server(app)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the server thread exited during startup")
            time.sleep(0.02)
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
