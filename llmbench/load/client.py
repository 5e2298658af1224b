"""Streaming clients for the native and OpenAI protocols, and the load generator.

`run_load` sends `num_requests` streamed requests, either from `concurrency` workers (closed
loop: each sends its next request when the previous one ends) or on a seeded schedule of
arrivals (open loop, `schedule`: each request is sent when due, however many are still
running), and returns a `LoadResult` (see `result` for what counts as served, how tokens
are counted and the timing rules) with one `RequestSample` per request, which records when
it was due and when it was sent: the client's own lag. Each stream is recorded as
(arrival, text) pairs and counted and timed after the run, so tokenizing never delays
reading the stream.

A workload planned in multi-turn sessions (`workload`) is sent a session at a time: the
schedule (or a closed-loop worker) begins each session, and every later turn is sent
`think_s` after the previous answer ended, with the conversation so far, as a user in a
chat does; its due time is that moment, so the client's lag means the same for every turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace

import httpx
from httpx_sse import EventSource, ServerSentEvent, SSEError

from llmbench.engine.config import SamplingParams
from llmbench.errors import UserError
from llmbench.load.cluster import spread_over_ray
from llmbench.load.config import (
    BAD_STREAM,
    CONNECTION_ERROR,
    ERROR_EVENT,
    SESSION_ENDED,
    TIMEOUT,
    LoadConfig,
)
from llmbench.load.objectives import Objectives
from llmbench.load.result import LoadResult, RequestSample, judged, token_timeline
from llmbench.load.workers import send_spread
from llmbench.load.workload import PlannedRequest

# Open loop: how long before a request is due the client stops sleeping and yields instead.
SPIN_S = 0.002


class ServerError(RuntimeError):
    """The server answered with an error status or an error event; `reason` is the short
    kind a load level counts ("HTTP 503", "error event")."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class Stream:
    """What one streamed request received: (arrival_s, text) per chunk, timed from send."""

    chunks: tuple[tuple[float, str], ...]
    end_s: float
    server: dict  # the server's own account: native `done` metrics or OpenAI `usage`

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.chunks)


# -- the protocols ---------------------------------------------------------------------


def request_body(config: LoadConfig, prompt: str, params: SamplingParams, stream: bool,
                 history: Sequence[tuple[str, str]] = ()) -> tuple[str, dict]:
    """(path, JSON body) of one request in `config.api`'s protocol; `history` is the
    conversation before `prompt`, (message, answer) per earlier turn: chat messages on
    /v1/chat/completions, a transcript of text (`transcript`) everywhere else, since the
    native routes and /v1/completions take one prompt."""
    if history and not (config.api == "openai" and config.chat):
        prompt, history = transcript(history, prompt), ()
    body: dict = {"temperature": params.temperature, "top_p": params.top_p}
    if params.seed is not None:
        body["seed"] = params.seed
    if config.api == "native":
        body.update(prompt=prompt, max_new_tokens=params.max_new_tokens, top_k=params.top_k,
                    ignore_eos=params.ignore_eos, chat=config.chat)
        return ("/stream" if stream else "/generate"), body
    # OpenAI: top_k and ignore_eos are extensions (vLLM's too); sent only when they matter.
    if params.top_k:
        body["top_k"] = params.top_k
    if params.ignore_eos:
        body["ignore_eos"] = True
    if config.model:
        body["model"] = config.model
    body.update(max_tokens=params.max_new_tokens, stream=stream)
    if stream:
        body["stream_options"] = {"include_usage": True}
    if config.chat:
        messages = [{"role": role, "content": text} for message, answer in history
                    for role, text in (("user", message), ("assistant", answer))]
        return "/v1/chat/completions", {**body, "messages": [*messages, {"role": "user",
                                                                          "content": prompt}]}
    return "/v1/completions", {**body, "prompt": prompt}


def transcript(history: Sequence[tuple[str, str]], prompt: str) -> str:
    """A conversation as one text: each earlier message and its answer, then `prompt`,
    apart by blank lines."""
    return "\n\n".join([text for turn in history for text in turn] + [prompt])


async def _events(response: httpx.Response) -> AsyncIterator[ServerSentEvent]:
    """The reply's Server-Sent Events, framed as the spec says (httpx-sse; an event without
    a name is "message"); a reply that is not an event stream is the server's error."""
    try:
        async for sse in EventSource(response).aiter_sse():
            yield sse
    except SSEError as exc:
        raise ServerError("not an event stream", str(exc)) from None


def _openai_text(chunk: dict) -> str:
    if "error" in chunk:
        raise ServerError(ERROR_EVENT, str(chunk["error"]))
    text = ""
    for choice in chunk.get("choices") or ():
        text += choice.get("text") or (choice.get("delta") or {}).get("content") or ""
    return text


async def stream_request(client: httpx.AsyncClient, config: LoadConfig, prompt: str,
                         params: SamplingParams, history: Sequence[tuple[str, str]] = ()
                         ) -> Stream:
    """Send one streamed request (after `history`, see `request_body`) and record when
    each chunk of text arrived."""
    path, body = request_body(config, prompt, params, stream=True, history=history)
    chunks: list[tuple[float, str]] = []
    server: dict = {}
    start = time.perf_counter()
    async with client.stream("POST", config.url.rstrip("/") + path, json=body) as response:
        if response.status_code != 200:
            detail = (await response.aread()).decode("utf-8", "replace")[:300]
            raise ServerError(f"HTTP {response.status_code}", detail)
        async with contextlib.aclosing(_events(response)) as events:
            async for sse in events:
                arrival = time.perf_counter() - start
                if sse.data == "[DONE]":
                    break
                payload = json.loads(sse.data)
                if sse.event == "error":
                    raise ServerError(ERROR_EVENT, str(payload.get("detail")))
                if config.api == "native":
                    if sse.event == "done":
                        server = payload
                    text = payload.get("text") or ""
                else:
                    server = payload.get("usage") or server
                    text = _openai_text(payload)
                if text:
                    chunks.append((arrival, text))
    return Stream(tuple(chunks), time.perf_counter() - start, server)


def _post_once(config: LoadConfig, prompt: str, params: SamplingParams) -> dict:
    """One blocking, non-streamed request in `config.api`'s protocol; the reply JSON."""
    path, body = request_body(config, prompt, params, stream=False)
    response = httpx.post(config.url.rstrip("/") + path, json=body, timeout=config.timeout_s)
    if response.status_code != 200:
        raise ServerError(f"HTTP {response.status_code}", response.text[:300])
    return response.json()


def complete_once(config: LoadConfig, prompt: str, params: SamplingParams) -> dict:
    """One blocking, non-streamed request in `config.api`'s protocol; returns
    {"text", "input_tokens", "output_tokens"} as the server reported them."""
    reply = _post_once(config, prompt, params)
    if config.api == "native":
        return {"text": reply["text"], "input_tokens": reply["input_tokens"],
                "output_tokens": reply["output_tokens"]}
    choice = reply["choices"][0]
    text = choice["message"]["content"] if "message" in choice else choice["text"]
    usage = reply.get("usage") or {}
    return {"text": text, "input_tokens": usage.get("prompt_tokens"),
            "output_tokens": usage.get("completion_tokens")}


# -- the load generator ----------------------------------------------------------------


def _sample(stream: Stream, count_tokens: Callable[[str], int], config: LoadConfig,
            params: SamplingParams) -> RequestSample:
    """The stream counted, timed and judged; the server's token count wins over ours."""
    ttft, itl, tokens = token_timeline(stream.chunks, count_tokens)
    key_out, key_in = (("output_tokens", "input_tokens") if config.api == "native"
                       else ("completion_tokens", "prompt_tokens"))
    reported = stream.server.get(key_out)
    return judged(RequestSample(
        latency_s=stream.end_s, ttft_s=ttft, itl_s=itl,
        output_tokens=tokens if reported is None else reported,
        counted_by="tokenizer" if reported is None else "server", tokenizer_tokens=tokens,
        server_output_tokens=reported, input_tokens=stream.server.get(key_in),
        server_decode_s=_seconds(stream.server.get("decode_ms_per_token")),
        num_chunks=len(stream.chunks)), params)


def _seconds(ms) -> float | None:
    return ms / 1e3 if isinstance(ms, int | float) and not isinstance(ms, bool) else None


def _failure(exc: Exception, latency_s: float) -> RequestSample:
    """A request that got no answer to judge: why, and when it gave up."""
    if isinstance(exc, ServerError):
        reason = exc.reason
    elif isinstance(exc, httpx.TimeoutException):
        reason = TIMEOUT
    elif isinstance(exc, httpx.HTTPError):
        reason = CONNECTION_ERROR
    else:  # ValueError: an event whose data is not JSON
        reason = BAD_STREAM
    return RequestSample(latency_s=latency_s, reason=reason,
                         error=f"{type(exc).__name__}: {exc}"[:300])


@dataclass(frozen=True)
class Sent:
    """What one client process sent: per request (when due, when sent, its stream or
    failure, its settings), the requests begun, and the wall time from its start."""

    outcomes: dict[int, tuple[float | None, float | None, Stream | RequestSample,
                              SamplingParams]]
    begun: dict[int, float]  # every request sent: when
    duration_s: float


def sessions_of(prompts: Sequence[str | PlannedRequest], num_requests: int
                ) -> list[list[int]]:
    """The level's request indices grouped in sessions, in order: a planned session's
    turns together, every other request a session of its own."""
    groups: list[list[int]] = []
    last = None
    for index in range(num_requests):
        request = prompts[index % len(prompts)]
        session = request.session if isinstance(request, PlannedRequest) else None
        if session is not None and session == last:
            groups[-1].append(index)
        else:
            groups.append([index])
        last = session
    return groups


async def _send(config: LoadConfig, params: SamplingParams,
                prompts: Sequence[str | PlannedRequest],
                progress: Callable[[], None] | None = None, share: tuple[int, int] = (0, 1),
                origin: float | None = None) -> Sent:
    """Send this process's `share` (worker w of n sends the sessions s with s mod n == w)
    of the level; times count from `origin` (a `time.monotonic()` moment every worker
    shares) or from now."""
    # Request i asks prompts[i % len(prompts)], so a seeded schedule sends the same requests.
    sent: dict[int, tuple[float | None, float | None, Stream | RequestSample,
                          SamplingParams]] = {}
    begun: dict[int, float] = {}
    sessions = sessions_of(prompts, config.num_requests)
    # Nagle's algorithm would hold small request writes for the server's delayed ACK.
    transport = httpx.AsyncHTTPTransport(
        limits=httpx.Limits(max_connections=(None if config.arrivals is not None
                                             else config.concurrency)),
        socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])

    async with httpx.AsyncClient(transport=transport, timeout=config.timeout_s) as client:
        start = time.perf_counter()
        if origin is not None:
            start += origin - time.monotonic()
            await _until(start)

        def done(index: int, entry: tuple) -> None:
            sent[index] = entry
            if progress is not None:
                progress()

        async def converse(indices: list[int], due: float | None) -> None:
            """One session: its turns in order, each sent `config.think_s` after the
            previous answer ended, with the conversation so far; `due` is the first turn's
            scheduled offset (None in closed loop, where nothing is scheduled)."""
            history: tuple[tuple[str, str], ...] = ()
            for turn, index in enumerate(indices):
                prompt, asked = _planned(prompts[index % len(prompts)], params)
                if turn:
                    next_due = time.perf_counter() - start + config.think_s
                    await _until(start + next_due)
                    due = None if due is None else next_due
                sent_s = time.perf_counter() - start
                begun[index] = sent_s
                try:
                    outcome: Stream | RequestSample = await stream_request(
                        client, config, prompt, asked, history)
                except (httpx.HTTPError, ServerError, ValueError) as exc:
                    outcome = _failure(exc, time.perf_counter() - start - sent_s)
                done(index, (due, sent_s, outcome, asked))
                if isinstance(outcome, RequestSample):  # no answer: no conversation to go on
                    for later in indices[turn + 1:]:
                        done(later, (None, None, _ended(turn, outcome),
                                     _planned(prompts[later % len(prompts)], params)[1]))
                    return
                history += ((prompt, outcome.text),)

        driver = asyncio.create_task(_open_loop(config, converse, sessions, start, share)
                                     if config.arrivals is not None
                                     else _closed_loop(config, converse, sessions))
        finished, _ = await asyncio.wait([driver], timeout=config.duration_s)
        if not finished:
            driver.cancel()  # cancels the requests still running, through their TaskGroup
        await asyncio.gather(driver, return_exceptions=True)
        if finished:
            driver.result()  # an unexpected error in the client is raised, not hidden
        duration = time.perf_counter() - start
    return Sent(sent, begun, duration)


def _ended(turn: int, failure: RequestSample) -> RequestSample:
    return RequestSample(latency_s=0.0, reason=SESSION_ENDED,
                         error=f"{SESSION_ENDED}: turn {turn + 1} of its session got no "
                               f"answer ({failure.reason})")


def _result(config: LoadConfig, params: SamplingParams, tokenizer, sent: Sent,
            objectives: Objectives | None, prompts: Sequence[str | PlannedRequest]
            ) -> LoadResult:
    """The level's result: every stream counted, timed and judged, in request order."""
    def count_tokens(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    def place(index: int) -> dict:
        request = prompts[index % len(prompts)]
        if isinstance(request, PlannedRequest) and request.session is not None:
            return {"session": request.session, "turn": request.turn}
        return {}

    measured = range(config.warmup, config.num_requests - config.cooldown)
    samples = tuple(
        replace(outcome if isinstance(outcome, RequestSample)
                else _sample(outcome, count_tokens, config, asked),
                index=index, scheduled_s=scheduled, sent_s=sent_s, measured=index in measured,
                max_new_tokens=asked.max_new_tokens, **place(index))
        for index, (scheduled, sent_s, outcome, asked) in sorted(sent.outcomes.items()))
    # Requests sent but not ended when --duration ran out, and how long each had run; those
    # never sent are not counted.
    cut_off = [sent.duration_s - sent_s for index, sent_s in sent.begun.items()
               if index not in sent.outcomes and index in measured]
    return LoadResult(config, params, sent.duration_s, samples, num_cut_off=len(cut_off),
                      objectives=objectives, cut_off_s=tuple(cut_off))


def _planned(request: str | PlannedRequest, params: SamplingParams
             ) -> tuple[str, SamplingParams]:
    """A request's prompt and its sampling settings: the run's, with its own token limit
    where the workload planned one."""
    if isinstance(request, str):
        return request, params
    if request.max_new_tokens is None:
        return request.prompt, params
    return request.prompt, replace(params, max_new_tokens=request.max_new_tokens)


async def _until(moment: float) -> None:
    """Wait until `time.perf_counter()` reaches `moment`. The event loop's timers wake up
    to a millisecond late (epoll counts whole milliseconds), so the last SPIN_S are waited
    by yielding to the loop, which keeps serving the running streams meanwhile."""
    while (delay := moment - time.perf_counter()) > 0:
        await asyncio.sleep(delay - SPIN_S if delay > SPIN_S else 0)


async def _closed_loop(config: LoadConfig, converse, sessions: list[list[int]]) -> None:
    """`concurrency` workers, each starting its next session when its previous one ends
    (without sessions: its next request when the previous one ends)."""
    waiting = iter(sessions)  # shared: each session is taken by one worker

    async def worker() -> None:
        for indices in waiting:
            await converse(indices, None)

    async with asyncio.TaskGroup() as group:
        for _ in range(config.concurrency):
            group.create_task(worker())


async def _open_loop(config: LoadConfig, converse, sessions: list[list[int]], start: float,
                     share: tuple[int, int] = (0, 1)) -> None:
    """Each session of this process's `share` begun at its scheduled offset from `start`
    (a `time.perf_counter()` moment), whether or not earlier ones have ended."""
    worker, workers = share
    arrivals = config.arrivals
    if len(sessions) != config.num_requests:
        # --rate counts requests: sessions of several turns begin proportionally less
        # often, so the level offers its rate once every session is under way.
        arrivals = replace(arrivals, rate=arrivals.rate * (len(sessions) / config.num_requests))
    async with asyncio.TaskGroup() as group:
        for number, (indices, offset) in enumerate(
                zip(sessions, arrivals.offsets(len(sessions)), strict=True)):
            if number % workers != worker:
                continue
            await _until(start + offset)
            group.create_task(converse(indices, float(offset)))


def run_load(config: LoadConfig, params: SamplingParams, tokenizer,
             prompts: Sequence[str | PlannedRequest],
             progress: Callable[[], None] | None = None,
             objectives: Objectives | None = None) -> LoadResult:
    """Send `config.num_requests` streamed requests, `config.concurrency` at a time or on
    the schedule of `config.arrivals` (from `config.workers` spawned processes, or from
    this one where there is one worker and no `own_process`), and measure each; blocks
    until done or `config.duration_s` has passed. `tokenizer` counts tokens where the
    server does not (`models.load_tokenizer`); `prompts` (texts, or a workload's planned
    requests with their own token limits) are cycled through. Empty answers, and short ones
    for fixed-length `params`, count as failures; `objectives` judge the measured requests."""
    if not prompts:
        raise UserError("the load generator needs at least one prompt")
    if config.workers > 1 or config.own_process or config.ray_address is not None:
        spread = send_spread if config.ray_address is None else spread_over_ray
        parts = spread(_send, config, params, prompts, progress)
        sent = Sent({i: o for part in parts for i, o in part.outcomes.items()},
                    {i: t for part in parts for i, t in part.begun.items()},
                    max(part.duration_s for part in parts))
    else:
        sent = asyncio.run(_send(config, params, prompts, progress))
    return _result(config, params, tokenizer, sent, objectives, prompts)
