"""The scheduler's running batch: the sequences being decoded together, their KV cache and
attention mask, and the step that advances them all by one token.

A new request is prefilled on its own and its first token emitted; unless that token ends
it, its cache joins the batch's (`kv_batch.merge`). Each `decode` feeds one token per row at
the row's own position, samples each row with its own `SamplingParams` and generator, emits
the tokens, and drops the rows that finished. Only the scheduler's thread touches a batch,
so it needs no lock; how requests end (counters, the `Outcome`) is the scheduler's, through
the `finish` callback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from llmbench.engine.device import sync
from llmbench.engine.loop import (
    TokenEvent,
    decode_step,
    ends_sequence,
    prefill,
    sample_next,
    sampling_generator,
)
from llmbench.engine.models import LoadedModel
from llmbench.engine.timing import device_clock
from llmbench.serve.kv_batch import check_batchable, keep_rows, merge
from llmbench.serve.request import Request

# finish(request, finish_reason, num_generated, error): ends a request with its Outcome.
Finish = Callable[[Request, str, int, str | None], None]


@dataclass
class Row:
    """A running sequence: its request, next position and generated tokens."""

    request: Request
    generator: torch.Generator | None
    position: int  # position id of the token fed at the next step
    last_token: int
    num_generated: int


class RunningBatch:
    """The rows being decoded together, with their cache and mask."""

    def __init__(self, lm: LoadedModel, finish: Finish):
        self.lm = lm
        self._finish = finish
        self._rows: list[Row] = []
        self._cache = None  # [batch, heads, seq, dim] keys and values per layer
        self._mask: torch.Tensor | None = None  # [batch, seq]: 0 marks left padding

    def __len__(self) -> int:
        return len(self._rows)

    @torch.inference_mode()
    def warm_up(self) -> None:
        """One merge and one batched step on padding tokens: first-call costs are paid, and a
        model whose cache cannot be batched is refused, before any request arrives."""
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

    def admit(self, request: Request) -> None:
        """Prefill one new request alone, emit its first token, and join it to the batch."""
        if request.is_cancelled:
            self._finish(request, "cancelled", 0, None)
            return
        device = self.lm.device
        ids = torch.tensor([request.prompt_ids], dtype=torch.long, device=device)  # [1, seq]
        logits, cache = prefill(self.lm, ids)
        generator = sampling_generator(request.params, device)
        token = int(sample_next(logits, request.params, generator)[0])
        now = device_clock(device)
        row = Row(request, generator, position=ids.shape[1], last_token=token,
                   num_generated=0)
        if emit(self.lm, self._finish, row, token, now):
            return
        mask = torch.ones_like(ids)
        if self._cache is None:
            self._cache, self._mask = cache, mask
        else:
            self._cache, self._mask = merge(self._cache, self._mask, cache, ids.shape[1])
        self._rows.append(row)

    def decode(self) -> None:
        """One token for every running row, then drop the rows that finished."""
        device = self.lm.device
        tokens = torch.tensor([[r.last_token] for r in self._rows], device=device)  # [batch, 1]
        positions = torch.tensor([[r.position] for r in self._rows], device=device)
        mask = torch.cat([self._mask, self._mask.new_ones((len(self._rows), 1))], dim=-1)
        # Without padding the mask is dropped, which keeps attention's unmasked fast path.
        logits, self._cache = decode_step(self.lm, tokens, self._cache,
                                          None if bool(mask.all()) else mask, positions)
        self._mask = mask
        greedy = logits.argmax(dim=-1).tolist()
        sampled = {index: int(sample_next(logits[index:index + 1], row.request.params,
                                          row.generator)[0])
                   for index, row in enumerate(self._rows) if not row.request.params.is_greedy}
        now = device_clock(device)
        keep = []
        for index, row in enumerate(self._rows):
            row.position += 1
            if not emit(self.lm, self._finish, row, sampled.get(index, greedy[index]), now):
                keep.append(index)
        if len(keep) < len(self._rows):
            self._keep_rows(keep)

    def drop_cancelled(self) -> None:
        """End the rows whose requests were cancelled, freeing their slots."""
        keep = []
        for index, row in enumerate(self._rows):
            if row.request.is_cancelled:
                self._finish(row.request, "cancelled", row.num_generated, None)
            else:
                keep.append(index)
        if len(keep) < len(self._rows):
            self._keep_rows(keep)

    def end_all(self, reason: str, error: str | None = None) -> None:
        """End every row with `reason` and empty the batch."""
        for row in self._rows:
            self._finish(row.request, reason, row.num_generated, error)
        self._rows, self._cache, self._mask = [], None, None

    def _keep_rows(self, keep: list[int]) -> None:
        self._rows = [self._rows[i] for i in keep]
        if not keep:
            self._cache, self._mask = None, None
            return
        self._cache, self._mask = keep_rows(self._cache, self._mask, keep)


def emit(lm: LoadedModel, finish: Finish, row: Row, token_id: int, now: float) -> bool:
    """Hand one token (sampled at `now`) to its row's request; True when the row is finished
    (and its request ended through `finish`)."""
    request = row.request
    request._put(TokenEvent(row.num_generated, token_id, now - request.submitted_at))
    row.num_generated += 1
    row.last_token = token_id
    params = request.params
    if ends_sequence(lm, token_id, params):
        finish(request, "stop", row.num_generated, None)
        return True
    if row.num_generated >= params.max_new_tokens:
        finish(request, "length", row.num_generated, None)
        return True
    return False
