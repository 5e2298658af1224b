"""Static batching for our loop: left padding, an attention mask, per-row stopping."""

from __future__ import annotations

import torch

from llmbench.engine.config import SamplingParams
from llmbench.engine.loop import (
    GenerationResult,
    TokenEvent,
    build_result,
    check_fits,
    decode_loop,
    ends_sequence,
)
from llmbench.engine.models import LoadedModel


def left_pad(prompts: list[list[int]], pad_id: int, device: torch.device
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad on the left so every row's last real token sits in the last column:
    returns (input_ids, attention_mask), both [batch, longest]."""
    if not prompts:
        raise ValueError("a batch needs at least one prompt")
    longest = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), longest), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, longest - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        mask[row, longest - len(prompt):] = 1
    return ids.to(device), mask.to(device)


def generate_static_batch(lm: LoadedModel, prompts: list[list[int]], params: SamplingParams,
                          use_cache: bool = True, kv_cache: str | None = None
                          ) -> list[GenerationResult]:
    """Generate for all prompts at once; each row stops on its own EOS or at the limit,
    and the batch stops when every row has."""
    for prompt in prompts:
        check_fits(lm, len(prompt), params)
    input_ids, attention_mask = left_pad(prompts, lm.pad_token_id, lm.device)
    # A batch without padding needs no mask, which keeps the fast causal attention path.
    if bool(attention_mask.all()):
        attention_mask = None
    events: list[list[TokenEvent]] = [[] for _ in prompts]
    done = [False] * len(prompts)
    steps = decode_loop(lm, input_ids, attention_mask, params, use_cache, kv_cache)
    try:
        for index in range(params.max_new_tokens):
            tokens, elapsed = next(steps)
            for row, token_id in enumerate(tokens.tolist()):
                if done[row]:
                    continue
                events[row].append(TokenEvent(index, token_id, elapsed))
                done[row] = ends_sequence(lm, token_id, params)
            if all(done):
                break
    finally:
        steps.close()
    engine = "loop" if use_cache else "loop-nocache"
    return [build_result(lm, len(p), ev, params, engine)
            for p, ev in zip(prompts, events, strict=True)]
