"""The inference server: a FastAPI app over the continuous-batching scheduler.

Routes: `POST /generate` (one JSON answer with timings), `POST /stream` (Server-Sent Events,
one `token` event per token, then a `done` event with the metrics), the OpenAI-compatible
`POST /v1/completions` and `POST /v1/chat/completions` (plain or streamed, `data: [DONE]`
last), `GET /v1/models`, `GET /health`, and FastAPI's `/openapi.json` and `/docs`.

Sampling defaults come from `SamplingParams` on every route, so the OpenAI routes are greedy
unless `temperature` is given (OpenAI's own default is 1). `top_k` and `ignore_eos` are
accepted on the OpenAI routes as extensions, as vLLM does (the `openai` client sends them
with `extra_body`). OpenAI parameters that would change the work done (`stop`, `n` > 1,
`logprobs`, penalties, ...) are rejected with 422 rather than silently ignored; unknown
fields are rejected too. `user` is accepted and ignored; `null` means "use the default".

Errors: invalid input -> 422 with `detail: [{loc, msg, type}]` naming the field; a prompt
that does not fit the context -> 422 stating the limit; a body over `max_body_bytes` ->
413; a body that is not UTF-8 -> 400 (FastAPI's); a full queue -> 503; unknown route ->
404. A client that disconnects cancels its
request, which leaves the batch at the next step.
"""

import asyncio
import contextlib
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import FastAPI, HTTPException
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from starlette.background import BackgroundTask
from starlette.requests import Request as HTTPRequest

from . import __version__
from .config import SamplingParams, default_of
from .engine import TokenEvent
from .errors import UserError
from .models import LoadedModel
from .prompts import encode, encode_chat
from .scheduler import Outcome, Request, Scheduler, SchedulerClosed, SchedulerFull

log = logging.getLogger("llmbench.server")

# Below this, logits / temperature overflows float32 and sampling fails; 0 means greedy.
MIN_TEMPERATURE = 1e-5
MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class ServerSettings:
    """How the server listens and what it accepts."""

    host: str = "127.0.0.1"
    port: int = 8000
    max_new_tokens_cap: int = 256
    max_batch_size: int = 16  # sequences decoded together
    max_waiting: int = 256  # queued requests beyond which the server answers 503
    max_body_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        if not self.host:
            raise UserError("--host must not be empty (use 127.0.0.1 for loopback)")
        if not 0 <= self.port <= 65535:
            raise UserError(f"--port must be in 0..65535 (0 picks a free port), got {self.port}")
        for name in ("max_new_tokens_cap", "max_batch_size", "max_waiting", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be at least 1, got {getattr(self, name)}")


# -- request and response schemas ------------------------------------------------------


def _valid_text(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text must be valid Unicode (it contains a lone surrogate)") from None
    return text


def _check_temperature(value: float) -> float:
    if 0 < value < MIN_TEMPERATURE:
        raise ValueError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE}")
    return value


_NEUTRAL = {"stop": (None, []), "n": (None, 1), "logprobs": (None, False, 0),
            "top_logprobs": (None, 0), "echo": (None, False), "best_of": (None, 1),
            "presence_penalty": (None, 0), "frequency_penalty": (None, 0),
            "logit_bias": (None, {}), "suffix": (None, ""), "tools": (None, []),
            "tool_choice": (None, "none"), "response_format": (None, {"type": "text"})}


def _schemas(cap: int) -> dict[str, type[BaseModel]]:
    """The request models for a server whose max_new_tokens cap is `cap`."""
    d = lambda name: default_of(SamplingParams, name)  # noqa: E731
    default_new_tokens = min(d("max_new_tokens"), cap)

    class Sampling(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        temperature: float = Field(d("temperature"), ge=0, allow_inf_nan=False,
                                   description="0 is greedy")
        top_k: int = Field(d("top_k"), ge=0, description="0 is off")
        top_p: float = Field(d("top_p"), gt=0, le=1, allow_inf_nan=False,
                             description="1 is off")
        seed: int | None = Field(d("seed"), ge=0, le=MAX_SEED)
        ignore_eos: bool = Field(d("ignore_eos"),
                                 description="generate exactly the requested tokens")

        @field_validator("temperature")
        @classmethod
        def check_temperature(cls, value: float) -> float:
            return _check_temperature(value)

        def params(self, max_new_tokens: int | None) -> SamplingParams:
            return SamplingParams(
                max_new_tokens=default_new_tokens if max_new_tokens is None else max_new_tokens,
                temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                seed=self.seed, ignore_eos=self.ignore_eos)

    class GenerateRequest(Sampling):
        prompt: str = Field(min_length=1)
        max_new_tokens: int = Field(default_new_tokens, ge=1, le=cap)
        chat: bool = Field(True, description="format the prompt with the chat template")

        @field_validator("prompt")
        @classmethod
        def check_prompt(cls, value: str) -> str:
            return _valid_text(value)

    class StreamOptions(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        include_usage: bool = False

    class OpenAIRequest(Sampling):
        model: str | None = None
        max_tokens: int | None = Field(None, ge=1, le=cap)
        stream: bool = False
        stream_options: StreamOptions | None = None
        user: str | None = None
        stop: Any = None
        n: Any = None
        logprobs: Any = None
        top_logprobs: Any = None
        presence_penalty: Any = None
        frequency_penalty: Any = None
        logit_bias: Any = None

        @model_validator(mode="before")
        @classmethod
        def null_means_default(cls, data: Any) -> Any:
            # OpenAI clients may send `"temperature": null` for "not set".
            return {k: v for k, v in data.items() if v is not None} if isinstance(
                data, dict) else data

        @field_validator(*_NEUTRAL, mode="before", check_fields=False)
        @classmethod
        def check_unsupported(cls, value: Any, info) -> Any:
            if value not in _NEUTRAL[info.field_name]:
                raise ValueError("not supported by llmbench serve: omit it")
            return value

    class CompletionRequest(OpenAIRequest):
        prompt: str | list[str] = Field(description="a string, or a list of exactly one")
        echo: Any = None
        best_of: Any = None
        suffix: Any = None

        @field_validator("prompt")
        @classmethod
        def check_prompt(cls, value: str | list[str]) -> str:
            if isinstance(value, list):
                if len(value) != 1:
                    raise ValueError("pass one prompt (batching happens across requests)")
                value = value[0]
            return _valid_text(value)

    class Message(BaseModel):
        model_config = ConfigDict(extra="ignore", strict=True)
        role: Literal["system", "developer", "user", "assistant"]
        content: str | list[dict[str, Any]]

        @field_validator("content")
        @classmethod
        def check_content(cls, value: str | list[dict[str, Any]]) -> str:
            if isinstance(value, list):
                if any(part.get("type") != "text" or not isinstance(part.get("text"), str)
                       for part in value):
                    raise ValueError("only text content parts are supported")
                value = "".join(part["text"] for part in value)
            return _valid_text(value)

    class ChatRequest(OpenAIRequest):
        messages: list[Message] = Field(min_length=1)
        max_completion_tokens: int | None = Field(None, ge=1, le=cap)
        tools: Any = None
        tool_choice: Any = None
        response_format: Any = None

    return {"generate": GenerateRequest, "completion": CompletionRequest,
            "chat": ChatRequest}


class GenerateResponse(BaseModel):
    text: str
    token_ids: list[int]
    input_tokens: int
    output_tokens: int
    ttft_ms: float
    latency_ms: float
    tokens_per_second: float
    finish_reason: str


# -- text deltas and SSE ---------------------------------------------------------------


class IncrementalDetokenizer:
    """Text deltas for a growing token sequence.

    Each push decodes a short window twice, the tokens already shown plus the new ones and
    the same window without them, and emits the difference; while the new tokens end in an
    incomplete UTF-8 sequence (a U+FFFD at the end) nothing is emitted and they are held
    back. `flush` emits whatever the whole decode has beyond the deltas sent.
    """

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        self._prefix = 0  # start of the context window
        self._read = 0  # end of what has been emitted
        self.text = ""

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=True)

    def push(self, token_id: int) -> str:
        self._ids.append(token_id)
        before = self._decode(self._ids[self._prefix:self._read])
        after = self._decode(self._ids[self._prefix:])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        delta = after[len(before):]
        self._prefix, self._read = self._read, len(self._ids)
        self.text += delta
        return delta

    def flush(self) -> str:
        full = self._decode(self._ids)
        delta = full[len(self.text):] if full.startswith(self.text) else ""
        self.text += delta
        return delta


def sse(data: dict | str, event: str | None = None) -> str:
    """One Server-Sent Event frame."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return (f"event: {event}\n" if event else "") + f"data: {payload}\n\n"


def _event_stream(frames: AsyncIterator[str], request: Request) -> StreamingResponse:
    # The background task cancels the request even when the client leaves before the
    # first frame, when the frame generator never starts and so never cleans up.
    return StreamingResponse(frames, media_type="text/event-stream",
                             background=BackgroundTask(request.cancel))


def _invalid(loc: list, msg: str) -> RequestValidationError:
    return RequestValidationError([{"loc": loc, "msg": msg, "type": "value_error"}])


# -- the app ---------------------------------------------------------------------------


class _BodyLimit:
    """Answer 413 before the app sees a body over `max_bytes` (declared or streamed)."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_large = JSONResponse({"detail": f"request body exceeds {self.max_bytes} bytes"},
                                 status_code=413)
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return await too_large(scope, receive, send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before sending its body
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await too_large(scope, receive, send)
            if not message.get("more_body", False):
                break
        pending = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replay():
            return pending.pop() if pending else await receive()

        await self.app(scope, replay, send)


def create_app(lm: LoadedModel, settings: ServerSettings) -> FastAPI:
    """The app for `lm`; its scheduler (`app.state.scheduler`) starts on the first request
    or at startup, and stops at shutdown."""
    scheduler = Scheduler(lm, settings.max_batch_size, settings.max_waiting)
    schemas = _schemas(settings.max_new_tokens_cap)
    GenerateRequest, CompletionRequest, ChatRequest = (  # noqa: N806 - classes
        schemas["generate"], schemas["completion"], schemas["chat"])

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await asyncio.to_thread(scheduler.start)  # warm up before the first request
        yield
        await asyncio.to_thread(scheduler.close)

    app = FastAPI(title="llmbench serve", version=__version__, lifespan=lifespan,
                  description=__doc__)
    app.state.scheduler, app.state.lm, app.state.settings = scheduler, lm, settings
    app.add_middleware(_BodyLimit, max_bytes=settings.max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def invalid(_, exc: RequestValidationError):
        # Only loc, msg and type: `input` and `ctx` may hold values JSON cannot encode (NaN).
        detail = [{"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", "")),
                   "type": str(e.get("type", ""))} for e in exc.errors()]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.exception_handler(UserError)
    async def user_error(_, exc: UserError):
        return JSONResponse({"detail": [{"loc": ["body"], "msg": str(exc),
                                         "type": "value_error"}]}, status_code=422)

    @app.exception_handler(Exception)
    async def internal(_, exc: Exception):
        log.exception("unhandled error", exc_info=exc)
        return JSONResponse({"detail": f"internal error ({type(exc).__name__}); see the server "
                                       "log"}, status_code=500)

    def submit(prompt_ids: list[int], params: SamplingParams, prompt_loc: list) -> Request:
        try:
            return scheduler.submit(prompt_ids, params, loop=asyncio.get_running_loop())
        except UserError as exc:
            raise _invalid(prompt_loc, str(exc)) from None
        except (SchedulerFull, SchedulerClosed) as exc:
            raise HTTPException(503, f"server busy: {exc}; retry later",
                                headers={"Retry-After": "1"}) from None

    async def run(http: HTTPRequest, request: Request
                  ) -> AsyncIterator[tuple[TokenEvent | Outcome, str]]:
        """(item, text delta) per token, then (outcome, final delta). Leaving early, or the
        client disconnecting, cancels the request."""
        async def watch():
            while not await http.is_disconnected():
                await asyncio.sleep(0.2)
            request.cancel()

        watcher = asyncio.create_task(watch())
        text = IncrementalDetokenizer(lm.tokenizer)
        try:
            async for item in request:
                yield item, (text.push(item.token_id) if isinstance(item, TokenEvent)
                             else text.flush())
        finally:
            watcher.cancel()
            request.cancel()

    def metrics(request: Request, outcome: Outcome, first: TokenEvent | None,
                received: float) -> dict:
        offset = request.submitted_at - received  # report times from the request's arrival
        latency = outcome.latency_s + offset
        return {"input_tokens": outcome.input_tokens, "output_tokens": outcome.output_tokens,
                "ttft_ms": 1e3 * (first.time_s + offset) if first else None,
                "latency_ms": 1e3 * latency,
                "tokens_per_second": outcome.output_tokens / latency if latency > 0 else 0.0,
                "finish_reason": outcome.finish_reason}

    def failure(outcome: Outcome) -> HTTPException:
        return HTTPException(503 if outcome.finish_reason == "cancelled" else 500,
                             outcome.error or "the server is shutting down")

    @app.get("/health")
    async def health() -> dict:
        """Liveness, and what is being served."""
        return {"status": "ok", "model": lm.name, "fingerprint": lm.fingerprint,
                "device": str(lm.device), "dtype": str(lm.dtype).removeprefix("torch."),
                "max_batch_size": settings.max_batch_size, "active": scheduler.num_active,
                "waiting": scheduler.num_waiting}

    @app.post("/generate", response_model=GenerateResponse)
    async def generate(body: GenerateRequest, http: HTTPRequest):
        """Generate and answer once with the text and timings."""
        received = time.perf_counter()
        ids = encode(lm.tokenizer, body.prompt, chat=body.chat and lm.is_chat)
        request = submit(ids, body.params(body.max_new_tokens), ["body", "prompt"])
        tokens: list[TokenEvent] = []
        text = ""
        async for item, delta in run(http, request):
            text += delta
            if isinstance(item, TokenEvent):
                tokens.append(item)
        outcome = request.outcome
        if outcome.finish_reason in ("cancelled", "error"):
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
        request = submit(ids, body.params(body.max_new_tokens), ["body", "prompt"])

        async def events() -> AsyncIterator[str]:
            first = None
            async for item, delta in run(http, request):
                if isinstance(item, TokenEvent):
                    first = first or item
                    elapsed = item.time_s + request.submitted_at - received
                    yield sse({"index": item.index, "token_id": item.token_id, "text": delta,
                               "time_ms": 1e3 * elapsed}, "token")
                elif item.finish_reason in ("cancelled", "error"):
                    yield sse({"detail": item.error or "cancelled"}, "error")
                else:
                    yield sse({"text": delta, **metrics(request, item, first, received)}, "done")

        return _event_stream(events(), request)

    async def openai(http: HTTPRequest, body, ids: list[int], max_tokens: int | None,
                     kind: str):
        request = submit(ids, body.params(max_tokens), ["body", "prompt" if kind == "text"
                                                        else "messages"])
        head = {"id": f"{'cmpl' if kind == 'text' else 'chatcmpl'}-{uuid.uuid4().hex}",
                "object": "text_completion" if kind == "text" else "chat.completion",
                "created": int(time.time()), "model": lm.name}

        def usage(outcome: Outcome) -> dict:
            return {"prompt_tokens": outcome.input_tokens,
                    "completion_tokens": outcome.output_tokens,
                    "total_tokens": outcome.input_tokens + outcome.output_tokens}

        def choice(text: str | None, finish: str | None, stream: bool) -> dict:
            if kind == "text":
                return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
            if stream:
                delta = {} if text is None else {"content": text}
                return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return {"index": 0, "message": {"role": "assistant", "content": text},
                    "logprobs": None, "finish_reason": finish}

        if not body.stream:
            text = ""
            async for _, delta in run(http, request):
                text += delta
            outcome = request.outcome
            if outcome.finish_reason in ("cancelled", "error"):
                raise failure(outcome)
            return {**head, "choices": [choice(text, outcome.finish_reason, False)],
                    "usage": usage(outcome)}

        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        chunk_head = {**head, "object": head["object"] + ("" if kind == "text" else ".chunk")}
        extra = {"usage": None} if include_usage else {}

        async def chunks() -> AsyncIterator[str]:
            if kind == "chat":
                yield sse({**chunk_head, "choices": [{"index": 0, "delta": {
                    "role": "assistant", "content": ""}, "logprobs": None,
                    "finish_reason": None}], **extra})
            async for item, delta in run(http, request):
                if isinstance(item, TokenEvent):
                    if delta:
                        yield sse({**chunk_head, "choices": [choice(delta, None, True)], **extra})
                    continue
                if item.finish_reason in ("cancelled", "error"):
                    yield sse({"error": {"message": item.error or "cancelled",
                                         "type": "server_error"}})
                    break
                yield sse({**chunk_head, "choices": [choice(delta or None, item.finish_reason,
                                                            True)], **extra})
                if include_usage:
                    yield sse({**chunk_head, "choices": [], "usage": usage(item)})
            yield sse("[DONE]")

        return _event_stream(chunks(), request)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, http: HTTPRequest):
        """OpenAI-compatible text completion (the prompt is used as raw text)."""
        ids = encode(lm.tokenizer, body.prompt, chat=False)
        return await openai(http, body, ids, body.max_tokens, "text")

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatRequest, http: HTTPRequest):
        """OpenAI-compatible chat completion through the model's chat template."""
        if body.max_tokens and body.max_completion_tokens and \
                body.max_tokens != body.max_completion_tokens:
            raise _invalid(["body", "max_completion_tokens"],
                           "differs from max_tokens: pass one of them")
        messages = [{"role": m.role, "content": m.content} for m in body.messages]
        try:
            ids = encode_chat(lm.tokenizer, messages)
        except UserError as exc:
            raise _invalid(["body", "messages"], str(exc)) from None
        return await openai(http, body, ids, body.max_completion_tokens or body.max_tokens,
                            "chat")

    @app.get("/v1/models")
    async def models() -> dict:
        """The one model served, in OpenAI's list format."""
        return {"object": "list", "data": [{"id": lm.name, "object": "model", "created": 0,
                                            "owned_by": "llmbench"}]}

    return app


@contextlib.contextmanager
def running_server(app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve `app` with uvicorn on a background thread; yields the base URL (port 0 picks a
    free port) and shuts the server down on exit."""
    import uvicorn

    # proto=IPPROTO_TCP, not 0: asyncio only disables Nagle on sockets that say they are
    # TCP, and with Nagle each streamed token waits for the client's delayed ACK (~40 ms).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
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
