"""A request submitted to the scheduler, as its caller holds it: iterated for its tokens and
then its `Outcome`, cancelled at any time, fed from the scheduler's thread."""

from __future__ import annotations

import asyncio
import queue
import statistics
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

from llmbench.engine.config import SamplingParams
from llmbench.engine.loop import TokenEvent


@dataclass(frozen=True)
class Outcome:
    """The last item of a request's stream: why it ended and when (seconds since submit)."""

    finish_reason: str  # "stop" (EOS), "length", "cancelled" or "error"
    input_tokens: int
    output_tokens: int
    latency_s: float
    error: str | None = None

    @property
    def is_failure(self) -> bool:
        """Cancelled or failed: the request has no complete answer to give."""
        return self.finish_reason in ("cancelled", "error")


class Request:
    """A submitted request: iterate it (sync or async) for `TokenEvent`s, then one `Outcome`.

    Items are delivered from the scheduler thread: into a thread-safe queue, or, when the
    request was submitted with an event loop, into an asyncio queue on that loop.
    """

    def __init__(self, request_id: int, prompt_ids: list[int], params: SamplingParams,
                 loop: asyncio.AbstractEventLoop | None):
        self.id = request_id
        self.prompt_ids = prompt_ids
        self.params = params
        self.submitted_at = time.perf_counter()
        self._loop = loop
        self._items: queue.SimpleQueue | asyncio.Queue = (
            asyncio.Queue() if loop is not None else queue.SimpleQueue())
        self._cancelled = threading.Event()
        self._wake = lambda: None  # set by the scheduler
        self.outcome: Outcome | None = None  # set (by the scheduler) just before delivery
        # When each token left the model (seconds since submit), as the scheduler saw it:
        # the engine's own pace for this request, before any HTTP or streaming.
        self.token_times: list[float] = []

    @property
    def is_cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """Stop generating for this request; its slot is freed at the next step boundary."""
        self._cancelled.set()
        self._wake()

    @property
    def decode_ms_per_token(self) -> float | None:
        """The median time between this request's consecutive tokens where the model made
        them (the scheduler's steps, batch and admissions included); None below 2 tokens."""
        gaps = [b - a for a, b in zip(self.token_times, self.token_times[1:], strict=False)]
        return 1e3 * statistics.median(gaps) if gaps else None

    def _put(self, item: TokenEvent | Outcome) -> None:
        if isinstance(item, TokenEvent):
            self.token_times.append(item.time_s)
        if self._loop is None:
            self._items.put(item)
            return
        try:
            self._loop.call_soon_threadsafe(self._items.put_nowait, item)
        except RuntimeError:  # the loop has closed: nobody is listening any more
            self.cancel()

    def __iter__(self) -> Iterator[TokenEvent | Outcome]:
        assert self._loop is None, "submitted with an event loop: use `async for`"
        while True:
            item = self._items.get()
            yield item
            if isinstance(item, Outcome):
                return

    async def __aiter__(self) -> AsyncIterator[TokenEvent | Outcome]:
        assert self._loop is not None, "submitted without an event loop: use `for`"
        while True:
            item = await self._items.get()
            yield item
            if isinstance(item, Outcome):
                return

