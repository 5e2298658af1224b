"""The requests that join the running batch at one step boundary, prefilled together.

Requests that arrive while a step runs wait for its end; then all of them are prefilled in
one forward pass, left-padded to the longest prompt under an attention mask, with each
row's own position ids, as the engine prefills a static batch. One pass over several
prompts costs far less than one pass each, and the requests that arrive together are
exactly the ones a burst of load brings. A lone request is prefilled without padding or
mask, as `engine.loop` prefills a single request on a growing cache. Each row's first
token is sampled with its own `SamplingParams` and generator and emitted at once; a row
that ends there never joins.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from llmbench.engine.batching import left_pad
from llmbench.engine.loop import positions_from_mask, prefill, sample_next, sampling_generator
from llmbench.engine.models import LoadedModel
from llmbench.engine.timing import device_clock
from llmbench.serve.kv_batch import keep_rows
from llmbench.serve.request import Request
from llmbench.serve.rows import Finish, Row, emit


@dataclass
class Admitted:
    """The rows still running after their first token, and their prefilled cache: a
    DynamicCache [rows, heads, longest, dim], left-padded, with its mask [rows, longest]."""

    rows: list[Row]
    cache: object
    mask: torch.Tensor


def prefill_requests(lm: LoadedModel, requests: list[Request], finish: Finish
                     ) -> Admitted | None:
    """Prefill `requests` together and emit each one's first token; None when none of them
    goes on (cancelled before it started, or ended by its first token)."""
    live = []
    for request in requests:
        if request.is_cancelled:
            finish(request, "cancelled", 0, None)
        else:
            live.append(request)
    if not live:
        return None
    device = lm.device
    prompts = [request.prompt_ids for request in live]
    if len(live) == 1:
        ids = torch.tensor(prompts, dtype=torch.long, device=device)
        mask = torch.ones_like(ids)
        logits, cache = prefill(lm, ids)
    else:
        ids, mask = left_pad(prompts, lm.pad_token_id, device)
        logits, cache = prefill(lm, ids, mask, positions_from_mask(mask))
    generators = [sampling_generator(request.params, device) for request in live]
    tokens = [int(sample_next(logits[i:i + 1], request.params, generators[i])[0])
              for i, request in enumerate(live)]
    now = device_clock(device)
    rows, keep = [], []
    for index, request in enumerate(live):
        row = Row(request, generators[index], position=len(request.prompt_ids),
                  last_token=tokens[index], num_generated=0)
        if not emit(lm, finish, row, tokens[index], now):
            rows.append(row)
            keep.append(index)
    if not rows:
        return None
    if len(keep) < len(live):
        cache, mask = keep_rows(cache, mask, keep)
    return Admitted(rows, cache, mask)
