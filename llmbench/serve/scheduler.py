"""Continuous batching for the server: one thread owns the model and decodes every running
request together, one token per request per step.

Requests arrive from any thread through `Scheduler.submit`, wait in a bounded queue, and join
the running batch at step boundaries: `running_batch.RunningBatch` on growing caches, or
`slot_batch.SlotBatch` when the model decodes on a static cache (`--cache static`, and
`--compile`). The requests admitted at one boundary are prefilled together in one
left-padded pass (`admission`; a lone request exactly as `engine.loop.stream` would serve
it), and each one's first token is emitted at once. Each step feeds one token per row, at
the row's own position ids and under a mask that shows each row only its own tokens, and
samples each row with its own `SamplingParams` and generator. A finished or cancelled row
leaves the batch at the next boundary. Greedy outputs therefore equal the single-request
outputs token for token, up to float rounding of batched kernels. This module owns the
queue, the thread and how requests end.

Why not transformers' `ContinuousBatchingManager`: it samples every request with one
generation config (greedy and sampled requests cannot share a batch), seeds the global RNG
once (no per-request `seed`), and its sampling chain differs from `engine.loop.sample_next`,
so a served request would not reproduce `llmbench generate`.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import threading
import time
from dataclasses import dataclass

import torch

from llmbench.engine.config import SamplingParams
from llmbench.engine.loop import check_fits
from llmbench.engine.models import LoadedModel
from llmbench.engine.openmp import release_thread_pool
from llmbench.errors import UserError
from llmbench.serve.request import Outcome, Request
from llmbench.serve.running_batch import RunningBatch
from llmbench.serve.settings import DEFAULT_MAX_CONTEXT
from llmbench.serve.slot_batch import SlotBatch


class SchedulerFull(RuntimeError):
    """Too many requests are already waiting; the caller should retry later (HTTP 503)."""


class SchedulerClosed(RuntimeError):
    """The scheduler is shutting down and takes no new requests."""


@dataclass
class SchedulerStats:
    """Counters for tests and /health; written only by the scheduler thread."""

    num_steps: int = 0
    num_admissions: int = 0  # boundaries where requests joined: one prefill pass each
    num_finished: int = 0
    num_cancelled: int = 0
    num_failed: int = 0
    peak_batch_size: int = 0


class Scheduler:
    """Owns `lm` on a background thread and batches all submitted requests step by step."""

    def __init__(self, lm: LoadedModel, max_batch_size: int, max_waiting: int,
                 max_context: int = DEFAULT_MAX_CONTEXT):
        if max_batch_size < 1 or max_waiting < 0:
            raise UserError("max_batch_size must be >= 1 and max_waiting >= 0, got "
                            f"{max_batch_size} and {max_waiting}")
        self.lm = lm
        self.max_batch_size = max_batch_size
        self.max_waiting = max_waiting
        self.stats = SchedulerStats()
        self._cond = threading.Condition()
        self._waiting: collections.deque[Request] = collections.deque()
        self._ids = itertools.count()
        # The model's cache decides the batch: growing caches joined and re-padded, or
        # preallocated slots (which a compiled decode step needs).
        self._batch = (SlotBatch(lm, self._finish, max_batch_size, max_context)
                       if lm.kv_cache == "static" else RunningBatch(lm, self._finish))
        self._thread: threading.Thread | None = None
        self._closing = False

    # -- any thread -------------------------------------------------------------------

    @property
    def num_active(self) -> int:
        """Sequences in the running batch (being decoded) right now."""
        return len(self._batch)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    def start(self) -> None:
        """Warm up (one batched step, which also checks the cache layout) and start the
        thread; idempotent."""
        with self._cond:
            if self._thread is not None:
                return
            if self._closing:
                raise SchedulerClosed("the scheduler was closed")
            self._batch.warm_up()
            # The warm-up made this thread an OpenMP master; a second master (the scheduler
            # thread) would slow every region of both (see engine.openmp).
            release_thread_pool()
            self._thread = threading.Thread(target=self._run, name="llmbench-scheduler",
                                            daemon=True)
            self._thread.start()

    def close(self, timeout: float | None = 10.0) -> None:
        """Fail waiting and running requests as cancelled and stop the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def submit(self, prompt_ids: list[int], params: SamplingParams,
               loop: asyncio.AbstractEventLoop | None = None) -> Request:
        """Queue a request; raises UserError if it cannot fit the context, SchedulerFull
        when `max_waiting` requests are already queued."""
        check_fits(self.lm, len(prompt_ids), params)
        if isinstance(self._batch, SlotBatch):
            self._batch.check_fits(len(prompt_ids), params.max_new_tokens)
        self.start()
        with self._cond:
            if self._closing:
                raise SchedulerClosed("the server is shutting down")
            if len(self._waiting) >= self.max_waiting:
                raise SchedulerFull(f"{len(self._waiting)} requests are already waiting")
            request = Request(next(self._ids), list(prompt_ids), params, loop)
            request._wake = self._notify
            self._waiting.append(request)
            self._cond.notify_all()
        return request

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # -- scheduler thread -------------------------------------------------------------

    def _run(self) -> None:
        with torch.inference_mode():
            while True:
                with self._cond:
                    if not (self._closing or self._waiting or len(self._batch)):
                        # Idle: leave the process's other threads the only OpenMP pool.
                        release_thread_pool()
                    while not (self._closing or self._waiting or len(self._batch)):
                        self._cond.wait()
                    if self._closing:
                        break
                    admitted = []
                    while self._waiting and len(self._batch) + len(admitted) < self.max_batch_size:
                        admitted.append(self._waiting.popleft())
                if admitted:
                    self.stats.num_admissions += 1
                    self._admit(admitted)
                    self.stats.peak_batch_size = max(self.stats.peak_batch_size,
                                                     len(self._batch))
                try:
                    self._batch.drop_cancelled()
                    if len(self._batch):
                        self._batch.decode()
                        self.stats.num_steps += 1
                except Exception as exc:  # noqa: BLE001 - fail the batch, keep serving
                    self._batch.end_all("error", _describe(exc))
        with self._cond:
            leftover = list(self._waiting)
            self._waiting.clear()
        for request in leftover:
            self._finish(request, "cancelled", 0)
        self._batch.end_all("cancelled")

    def _admit(self, requests: list[Request]) -> None:
        """Join `requests` to the batch; a failure fails only the requests it must."""
        try:
            self._batch.admit(requests)
        except Exception as exc:  # noqa: BLE001 - fail these requests, keep serving
            for request in requests:
                if len(requests) > 1 and request.outcome is None and not request.token_times:
                    # Not started: the group's failure may be another request's (a prompt
                    # too large for memory), so it gets a pass of its own.
                    self._admit([request])
                else:
                    self._finish(request, "error", len(request.token_times), _describe(exc))

    def _finish(self, request: Request, reason: str, num_generated: int,
                error: str | None = None) -> None:
        if request.outcome is not None:
            return
        outcome = Outcome(reason, len(request.prompt_ids), num_generated,
                          time.perf_counter() - request.submitted_at, error)
        request.outcome = outcome
        if reason == "cancelled":
            self.stats.num_cancelled += 1
        elif reason == "error":
            self.stats.num_failed += 1
        else:
            self.stats.num_finished += 1
        request._put(outcome)


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"
