"""A running sequence as every running batch holds it, and how each of its tokens is handed
to its request (and the request ended when that token ends it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from llmbench.engine.loop import TokenEvent, ends_sequence
from llmbench.engine.models import LoadedModel
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
