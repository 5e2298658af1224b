"""The running batch on a preallocated cache (`--cache static`, and `--compile`): sequences
in slots of one `SlotCache`, decoded together, one token per sequence per step.

The requests admitted at a step boundary are prefilled together (`admission`: a lone one
without padding or mask), and each one's keys and values, without the padding, are copied
into the first free slot. Running sequences fill slots 0..k-1
without gaps (a finished one's slot takes the last sequence), and each step decodes a view
of the first slots, so a batch of one does the work of one. Each row attends to its own
columns only (a 4D mask built from the rows' lengths) at its own position ids, so greedy
outputs equal the single-request outputs token for token, up to float rounding.

Compiled, each step runs the graph of the smallest batch bucket (1, 2, 4, ...) that holds
the running sequences, the unused rows of the bucket decoding a pad token in a free slot;
every bucket's graph is compiled by `warm_up`, before the server takes requests, so no
request ever waits for a compile. Eager, the view is exactly the running rows.

The price of a static cache: attention spans every column of a slot (`max_len`, the
server's `--max-context`) at every step, the unused ones masked, so a slot far longer
than the requests costs time.
"""

from __future__ import annotations

import torch

from llmbench.engine.device import sync
from llmbench.engine.loop import decode_step, prefill, sample_next
from llmbench.engine.models import LoadedModel
from llmbench.engine.timing import device_clock
from llmbench.errors import UserError
from llmbench.serve.admission import prefill_requests
from llmbench.serve.kv_batch import check_batchable
from llmbench.serve.request import Request
from llmbench.serve.rows import Finish, Row, emit
from llmbench.serve.slot_cache import SlotCache


def buckets(max_batch_size: int) -> tuple[int, ...]:
    """The batch sizes a compiled step runs at: powers of two below `max_batch_size`, and it."""
    sizes, size = [], 1
    while size < max_batch_size:
        sizes.append(size)
        size *= 2
    return (*sizes, max_batch_size)


class SlotBatch:
    """The rows being decoded together, in the slots of one preallocated cache."""

    def __init__(self, lm: LoadedModel, finish: Finish, max_batch_size: int, max_len: int):
        if not 2 <= max_len <= lm.context_length:
            raise UserError(f"--max-context must be between 2 and {lm.name}'s context of "
                            f"{lm.context_length} tokens, got {max_len}")
        self.lm = lm
        self._finish = finish
        self.max_len = max_len
        # Compiled steps run at bucket sizes (one graph each); eager ones at the exact size.
        self._sizes = buckets(max_batch_size) if lm.compiled_decoder is not None else None
        self._rows: list[Row] = []
        self._cache = SlotCache.allocate(lm.model, lm.dtype, max_batch_size, max_len)
        self._views: dict[int, SlotCache] = {}  # kept: a compiled graph is per view object
        self._columns = torch.arange(max_len, device=lm.device)
        self._blocked = torch.finfo(self._cache.layers[0].keys.dtype).min

    def __len__(self) -> int:
        return len(self._rows)

    def check_fits(self, num_input_tokens: int, max_new_tokens: int) -> None:
        """UserError unless a request this long fits a slot."""
        # The last token is returned, never written: a slot holds one fewer.
        if num_input_tokens + max_new_tokens - 1 > self.max_len:
            raise UserError(f"the prompt ({num_input_tokens} tokens) plus max_new_tokens "
                            f"({max_new_tokens}) exceed this server's static cache of "
                            f"{self.max_len} tokens per sequence: shorten them, or restart "
                            "the server with a larger --max-context")

    @torch.inference_mode()
    def warm_up(self) -> None:
        """A prefill, and one step at every batch size a step can run at (compiled: every
        bucket's graph), on pad tokens in free slots. A model whose attention is not full in
        every layer (a sliding window) is refused: a slot's mask shows every position."""
        pad = self.lm.pad_token_id
        _, cache = prefill(self.lm, torch.tensor([[pad]], device=self.lm.device))
        check_batchable(cache, self.lm.name)
        self._cache.put(0, cache, 0, 0, 1)
        for size in self._sizes or (1,):
            self._step(size, [pad] * size, [1] * size)
        sync(self.lm.device)

    def admit(self, requests: list[Request]) -> None:
        """Prefill the new requests together, emit their first tokens, and give each one
        that goes on a slot."""
        admitted = prefill_requests(self.lm, requests, self._finish)
        if admitted is None:
            return
        width = admitted.mask.shape[1]
        for index, row in enumerate(admitted.rows):
            # Its prompt is right-aligned in the prefill's columns, after its padding.
            self._cache.put(len(self._rows) + index, admitted.cache, index,
                            width - row.position, row.position)
        self._rows += admitted.rows  # only once every slot is filled: all join, or none

    def decode(self) -> None:
        """One token for every running row, then free the slots of the rows that finished."""
        logits = self._step(len(self._rows), [r.last_token for r in self._rows],
                            [r.position for r in self._rows])
        greedy = logits.argmax(dim=-1).tolist()
        now = device_clock(self.lm.device)
        done = []
        for index, row in enumerate(self._rows):
            token = (greedy[index] if row.request.params.is_greedy else
                     int(sample_next(logits[index:index + 1], row.request.params,
                                     row.generator)[0]))
            row.position += 1
            if emit(self.lm, self._finish, row, token, now):
                done.append(index)
        self._free(done)

    def _step(self, rows: int, tokens: list[int], lengths: list[int]) -> torch.Tensor:
        """Decode `rows` sequences of these lengths, fed these tokens, in slots 0..rows-1:
        each writes at column `length` and sees columns 0..length. Returns [rows, vocab]."""
        size = rows if self._sizes is None else next(s for s in self._sizes if s >= rows)
        view = self._views.get(size)
        if view is None:
            view = self._views[size] = self._cache.view(size)
        # Rows past the running ones (a bucket's spare rows) decode a pad token at the last
        # column of their free slot, seeing only it: no NaN, no effect on running rows.
        spare = size - rows
        device = self.lm.device
        fed = torch.tensor(tokens + [self.lm.pad_token_id] * spare, device=device)[:, None]
        at = torch.tensor(lengths + [self.max_len - 1] * spare, device=device)
        view.write_at.copy_(at)
        low = torch.tensor([0] * rows + [self.max_len - 1] * spare, device=device)
        visible = (self._columns[None, :] >= low[:, None]) & (self._columns[None, :] <= at[:, None])
        mask = torch.zeros((size, 1, 1, self.max_len), dtype=view.layers[0].keys.dtype,
                           device=device)
        mask.masked_fill_(~visible[:, None, None, :], self._blocked)
        logits, _ = decode_step(self.lm, fed, view, mask, at[:, None])
        return logits[:rows]

    def _free(self, indices: list[int]) -> None:
        """Drop these rows; the last running rows move into their slots, so the running
        rows stay in slots 0..k-1."""
        for index in sorted(indices, reverse=True):
            last = len(self._rows) - 1
            if index != last:
                # The moved row has written `position` columns (its prompt and every token
                # fed back so far).
                self._cache.move(last, index, self._rows[last].position)
                self._rows[index] = self._rows[last]
            self._rows.pop()

    def drop_cancelled(self) -> None:
        """End the rows whose requests were cancelled, freeing their slots."""
        cancelled = [i for i, row in enumerate(self._rows) if row.request.is_cancelled]
        for index in cancelled:
            row = self._rows[index]
            self._finish(row.request, "cancelled", row.num_generated, None)
        self._free(cancelled)

    def end_all(self, reason: str, error: str | None = None) -> None:
        """End every row with `reason` and empty the batch."""
        for row in self._rows:
            self._finish(row.request, reason, row.num_generated, error)
        self._rows = []
