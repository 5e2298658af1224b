"""Continuous batching for the server: one thread owns the model and decodes every running
request together, one token per request per step.

Requests arrive from any thread through `Scheduler.submit` and join at step boundaries. A
new prompt is prefilled on its own, exactly as `engine.loop.stream` would serve it alone, so
its first token is the single-request token. Its KV cache then joins the running batch,
left-padded to the batch's length (or the batch padded to it). Each step feeds one token per
row under an attention mask that hides the padding, with each row's own position ids, and
samples each row with its own `SamplingParams` and generator. A finished or cancelled row
leaves the batch at the next boundary; cache columns that became padding in every row are
dropped. Greedy outputs therefore equal the single-request outputs token for token, up to
float rounding of batched kernels.

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
from llmbench.engine.device import sync
from llmbench.engine.loop import (
    TokenEvent,
    check_fits,
    decode_step,
    ends_sequence,
    prefill,
    sample_next,
    sampling_generator,
)
from llmbench.engine.models import LoadedModel
from llmbench.engine.timing import device_clock
from llmbench.errors import UserError
from llmbench.serve.kv_batch import check_batchable, keep_rows, merge
from llmbench.serve.request import Outcome, Request


class SchedulerFull(RuntimeError):
    """Too many requests are already waiting; the caller should retry later (HTTP 503)."""


class SchedulerClosed(RuntimeError):
    """The scheduler is shutting down and takes no new requests."""


@dataclass
class _Row:
    """A running sequence: its request, next position and generated tokens."""

    request: Request
    generator: torch.Generator | None
    position: int  # position id of the token fed at the next step
    last_token: int
    num_generated: int


@dataclass
class SchedulerStats:
    """Counters for tests and /health; written only by the scheduler thread."""

    num_steps: int = 0
    num_finished: int = 0
    num_cancelled: int = 0
    num_failed: int = 0
    peak_batch_size: int = 0


class Scheduler:
    """Owns `lm` on a background thread and batches all submitted requests step by step."""

    def __init__(self, lm: LoadedModel, max_batch_size: int, max_waiting: int):
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
        self._rows: list[_Row] = []
        self._cache = None  # the running batch's KV cache, [batch, heads, seq, dim] per layer
        self._mask: torch.Tensor | None = None  # [batch, seq]: 0 marks left padding
        self._thread: threading.Thread | None = None
        self._closing = False

    # -- any thread -------------------------------------------------------------------

    @property
    def num_active(self) -> int:
        """Sequences in the running batch (being decoded) right now."""
        return len(self._rows)

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
            self._warm_up()
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

    @torch.inference_mode()
    def _warm_up(self) -> None:
        pad = self.lm.pad_token_id
        first = torch.tensor([[pad, pad]], device=self.lm.device)
        _, cache = prefill(self.lm, first)
        check_batchable(cache, self.lm.name)
        _, other = prefill(self.lm, first[:, :1])
        cache, mask = merge(cache, torch.ones((1, 2), dtype=torch.long, device=first.device),
                            other, 1)
        mask = torch.cat([mask, mask.new_ones((2, 1))], dim=-1)
        decode_step(self.lm, first[:, :1].repeat(2, 1), cache, mask,
                    torch.tensor([[2], [1]], device=first.device))
        sync(self.lm.device)

    def _run(self) -> None:
        with torch.inference_mode():
            while True:
                with self._cond:
                    while not (self._closing or self._waiting or self._rows):
                        self._cond.wait()
                    if self._closing:
                        break
                    admitted = []
                    while self._waiting and len(self._rows) + len(admitted) < self.max_batch_size:
                        admitted.append(self._waiting.popleft())
                for request in admitted:
                    try:
                        self._admit(request)
                    except Exception as exc:  # noqa: BLE001 - fail this request, keep serving
                        self._finish(request, "error", 0, _describe(exc))
                try:
                    self._drop_cancelled()
                    if self._rows:
                        self._decode()
                except Exception as exc:  # noqa: BLE001 - fail the batch, keep serving
                    self._fail_running(_describe(exc))
        with self._cond:
            leftover = list(self._waiting)
            self._waiting.clear()
        for request in leftover:
            self._finish(request, "cancelled", 0)
        for row in self._rows:
            self._finish(row.request, "cancelled", row.num_generated)
        self._rows, self._cache, self._mask = [], None, None

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

    def _fail_running(self, message: str) -> None:
        for row in self._rows:
            self._finish(row.request, "error", row.num_generated, message)
        self._rows, self._cache, self._mask = [], None, None

    def _emit(self, row: _Row, token_id: int, now: float) -> bool:
        """Hand one token (sampled at `now`) to its request; True when the row is finished."""
        request = row.request
        request._put(TokenEvent(row.num_generated, token_id, now - request.submitted_at))
        row.num_generated += 1
        row.last_token = token_id
        params = request.params
        if ends_sequence(self.lm, token_id, params):
            self._finish(request, "stop", row.num_generated)
            return True
        if row.num_generated >= params.max_new_tokens:
            self._finish(request, "length", row.num_generated)
            return True
        return False

    def _admit(self, request: Request) -> None:
        """Prefill one new request alone, emit its first token, and join it to the batch."""
        if request.is_cancelled:
            self._finish(request, "cancelled", 0)
            return
        device = self.lm.device
        ids = torch.tensor([request.prompt_ids], dtype=torch.long, device=device)  # [1, seq]
        logits, cache = prefill(self.lm, ids)
        generator = sampling_generator(request.params, device)
        token = int(sample_next(logits, request.params, generator)[0])
        now = device_clock(device)
        row = _Row(request, generator, position=ids.shape[1], last_token=token,
                   num_generated=0)
        if self._emit(row, token, now):
            return
        mask = torch.ones_like(ids)
        if self._cache is None:
            self._cache, self._mask = cache, mask
        else:
            self._cache, self._mask = merge(self._cache, self._mask, cache, ids.shape[1])
        self._rows.append(row)
        self.stats.peak_batch_size = max(self.stats.peak_batch_size, len(self._rows))

    def _decode(self) -> None:
        """One token for every running row, then drop the rows that finished."""
        device = self.lm.device
        tokens = torch.tensor([[r.last_token] for r in self._rows], device=device)  # [batch, 1]
        positions = torch.tensor([[r.position] for r in self._rows], device=device)
        mask = torch.cat([self._mask, self._mask.new_ones((len(self._rows), 1))], dim=-1)
        # Without padding the mask is dropped, which keeps attention's unmasked fast path.
        logits, self._cache = decode_step(self.lm, tokens, self._cache,
                                          None if bool(mask.all()) else mask, positions)
        self._mask = mask
        self.stats.num_steps += 1
        greedy = logits.argmax(dim=-1).tolist()
        sampled = {index: int(sample_next(logits[index:index + 1], row.request.params,
                                          row.generator)[0])
                   for index, row in enumerate(self._rows) if not row.request.params.is_greedy}
        now = device_clock(device)
        keep = []
        for index, row in enumerate(self._rows):
            row.position += 1
            if not self._emit(row, sampled.get(index, greedy[index]), now):
                keep.append(index)
        if len(keep) < len(self._rows):
            self._keep_rows(keep)

    def _drop_cancelled(self) -> None:
        keep = []
        for index, row in enumerate(self._rows):
            if row.request.is_cancelled:
                self._finish(row.request, "cancelled", row.num_generated)
            else:
                keep.append(index)
        if len(keep) < len(self._rows):
            self._keep_rows(keep)

    def _keep_rows(self, keep: list[int]) -> None:
        self._rows = [self._rows[i] for i in keep]
        if not keep:
            self._cache, self._mask = None, None
            return
        self._cache, self._mask = keep_rows(self._cache, self._mask, keep)


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"
