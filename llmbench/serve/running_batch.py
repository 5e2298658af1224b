"""The scheduler's running batch: the sequences being decoded together, their KV cache and
attention mask, and the step that advances them all by one token.

The requests admitted at a step boundary are prefilled together and their first tokens
emitted (`admission`); the ones that go on join the batch's cache (`kv_batch.merge`).
Each `decode` feeds one token per row at the row's own position, samples each row with
its own `SamplingParams` and generator, emits the tokens, and drops the rows that
finished. Only the scheduler's thread touches a batch, so it needs no lock; how requests
end (counters, the `Outcome`) is the scheduler's, through the `finish` callback.
"""

from __future__ import annotations

import torch

from llmbench.engine.device import sync
from llmbench.engine.loop import decode_step, prefill, sample_next
from llmbench.engine.models import LoadedModel
from llmbench.engine.timing import device_clock
from llmbench.serve.admission import prefill_requests
from llmbench.serve.kv_batch import check_batchable, keep_rows, merge
from llmbench.serve.request import Request
from llmbench.serve.rows import Finish, Row, emit


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
        ones = torch.ones((1, 2), dtype=torch.long, device=first.device)
        cache, mask = merge(cache, ones, other, ones[:, :1])
        mask = torch.cat([mask, mask.new_ones((2, 1))], dim=-1)
        decode_step(self.lm, first[:, :1].repeat(2, 1), cache, mask,
                    torch.tensor([[2], [1]], device=first.device))
        sync(self.lm.device)

    def admit(self, requests: list[Request]) -> None:
        """Prefill the new requests together, emit their first tokens, and join the ones
        that go on to the batch."""
        admitted = prefill_requests(self.lm, requests, self._finish)
        if admitted is None:
            return
        if self._cache is None:
            self._cache, self._mask = admitted.cache, admitted.mask
        else:
            self._cache, self._mask = merge(self._cache, self._mask, admitted.cache,
                                            admitted.mask)
        self._rows += admitted.rows

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
