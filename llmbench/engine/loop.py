"""Generation: our prefill/decode loop with a KV cache.

`prefill` runs the prompt once and keeps only the last position's logits; `decode_step`
feeds one token per sequence and reuses the cache. `decode_loop` drives both for a batch
and yields each step's tokens with a timestamp taken after a device sync; `stream` and
`generate` are the single-sequence views of it; `hf.hf_generate` is transformers' own
`model.generate`, the reference our loop is measured against. All paths return the same
`GenerationResult` record.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import torch

from llmbench.engine.config import SamplingParams
from llmbench.engine.kv_cache import full_width_mask, is_static, new_cache
from llmbench.engine.models import LoadedModel
from llmbench.engine.timing import Stopwatch
from llmbench.errors import UserError


@dataclass(frozen=True)
class TokenEvent:
    """One generated token as it leaves the engine; `time_s` counts from the request start."""

    index: int
    token_id: int
    time_s: float


@dataclass(frozen=True)
class GenerationResult:
    """What one generation produced and how long each phase took."""

    token_ids: tuple[int, ...]
    text: str
    input_tokens: int
    output_tokens: int
    ttft_s: float | None  # prefill plus the first sampled token; None: not measured
    decode_times_s: tuple[float, ...]  # one per token after the first
    latency_s: float
    finish_reason: str  # "stop" (EOS) or "length"
    engine: str

    @property
    def tokens_per_second(self) -> float:
        return self.output_tokens / self.latency_s if self.latency_s > 0 else float("inf")

    @property
    def decode_ms_per_token(self) -> float | None:
        if not self.decode_times_s:
            return None
        return 1000.0 * sum(self.decode_times_s) / len(self.decode_times_s)

    def to_dict(self) -> dict:
        record = asdict(self)
        record["token_ids"] = list(self.token_ids)
        record["decode_times_s"] = list(self.decode_times_s)
        record["tokens_per_second"] = self.tokens_per_second
        record["decode_ms_per_token"] = self.decode_ms_per_token
        return record


@functools.cache
def _cache_keyword(model_cls: type) -> str:
    # transformers 5 renamed `past_key_values` to `cache`; support both so an upgrade can be
    # benchmarked against the version before it.
    params = inspect.signature(model_cls.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _forward(model, input_ids, attention_mask, position_ids, cache, use_cache: bool,
             call=None):
    """One forward pass through `call` (a compiled version of the model's call; None: the
    model itself)."""
    kwargs = {_cache_keyword(type(model)): cache}
    out = (call or model)(input_ids=input_ids, attention_mask=attention_mask,
                          position_ids=position_ids, use_cache=use_cache, logits_to_keep=1,
                          **kwargs)
    new_cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
    return out.logits[:, -1, :], new_cache  # logits: [batch, vocab]


def prefill(lm: LoadedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
            position_ids: torch.Tensor | None = None, cache=None):
    """Run the whole prompt once ([batch, seq]); returns (last-position logits, KV cache).
    `cache`: an empty cache to fill (a preallocated one); None lets the model grow its own."""
    return _forward(lm.model, input_ids, attention_mask, position_ids, cache, use_cache=True)


def request_cache(lm: LoadedModel, max_len: int, kind: str | None = None):
    """The empty cache one request starts on: of `kind` (None: the model's default), able to
    hold `max_len` positions per row; None when the model should grow its own."""
    return new_cache(lm.model, kind or lm.kv_cache, max_len)


def decode_step(lm: LoadedModel, token_ids: torch.Tensor, cache,
                attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None):
    """Feed one token per sequence ([batch, 1]) on top of `cache`; returns (logits, cache).
    Runs compiled when the model has a compiled decoder and the cache is static."""
    call = lm.compiled_decoder if is_static(cache) else None
    return _forward(lm.model, token_ids, attention_mask, position_ids, cache, use_cache=True,
                    call=call)


def sample_next(logits: torch.Tensor, params: SamplingParams,
                generator: torch.Generator | None) -> torch.Tensor:
    """Pick the next token per row of `logits` ([batch, vocab]) -> [batch]."""
    if params.is_greedy:
        return logits.argmax(dim=-1)
    # Shift so the best score is 0 before dividing: a tiny temperature then sends the
    # others to -inf instead of overflowing everything to inf (and softmax to NaN).
    scores = logits.float()
    scores = (scores - scores.max(dim=-1, keepdim=True).values) / params.temperature
    if params.top_k:
        kth = torch.topk(scores, min(params.top_k, scores.shape[-1]), dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
        probs = sorted_scores.softmax(dim=-1)
        # Drop a token when the tokens ranked above it already cover top_p. The best token
        # always survives, also when top_p is below float32's smallest value (~1e-45) and
        # the comparison sees 0: with every token dropped, softmax is NaN and sampling fails.
        drop = (probs.cumsum(dim=-1) - probs) >= params.top_p
        drop[:, 0] = False
        sorted_scores = sorted_scores.masked_fill(drop, float("-inf"))
        scores = torch.full_like(scores, float("-inf")).scatter(-1, order, sorted_scores)
    probs = scores.softmax(dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)


def sampling_generator(params: SamplingParams, device: torch.device) -> torch.Generator | None:
    """The per-request RNG (None when greedy), seeded from `params.seed` when given; every
    driver of `prefill`/`decode_step` (this loop, the server's scheduler) seeds the same way."""
    if params.is_greedy:
        return None
    generator = torch.Generator(device=device)
    if params.seed is None:
        generator.seed()
    else:
        generator.manual_seed(params.seed)
    return generator


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that skip left padding: [batch, seq]."""
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


def ends_sequence(lm: LoadedModel, token_id: int, params: SamplingParams) -> bool:
    """Whether `token_id` ends its sequence: it is one of the model's EOS ids and the request
    does not ignore EOS. Every path that stops a sequence asks here."""
    return not params.ignore_eos and token_id in lm.eos_token_ids


def check_fits(lm: LoadedModel, num_input_tokens: int, params: SamplingParams) -> None:
    """A user error unless the prompt plus the requested tokens fit the context window."""
    if num_input_tokens < 1:
        raise UserError("the prompt is empty: pass at least one token of text")
    total = num_input_tokens + params.max_new_tokens
    if total > lm.context_length:
        raise UserError(
            f"prompt of {num_input_tokens} tokens plus max_new_tokens={params.max_new_tokens} "
            f"exceeds the model's context of {lm.context_length} tokens: shorten the prompt "
            "or lower max_new_tokens"
        )


@torch.inference_mode()
def decode_loop(lm: LoadedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                params: SamplingParams, use_cache: bool = True, kv_cache: str | None = None
                ) -> Iterator[tuple[torch.Tensor, float]]:
    """Yield (next tokens [batch], seconds since start) once per step.

    The caller stops it (EOS, token limit): a dynamic cache grows as long as it is asked to,
    a static one is sized for `params.max_new_tokens` tokens, so ask for no more.
    `attention_mask` is needed only when rows are left-padded. With `use_cache=False` every
    step recomputes the whole sequence: the kv-cache experiment's cache-off side.
    `kv_cache` picks the cache kind (`llmbench.engine.kv_cache`); None: the model's default.
    """
    device = lm.device
    generator = sampling_generator(params, device)
    position_ids = positions_from_mask(attention_mask) if attention_mask is not None else None
    watch = Stopwatch(device)
    written = input_ids.shape[1]  # positions in the cache after prefill
    fixed_width = False
    if use_cache:
        # Preallocating is part of the request's cost, as it is for `model.generate`. The
        # last token is returned, never fed back: the cache holds one position fewer than
        # the prompt plus every new token, the length `model.generate` allocates too.
        max_len = written + params.max_new_tokens - 1
        empty = request_cache(lm, max_len, kv_cache)
        if attention_mask is not None and is_static(empty):
            attention_mask, fixed_width = full_width_mask(attention_mask, max_len), True
        logits, cache = prefill(lm, input_ids, attention_mask, position_ids, empty)
    else:
        logits, _ = _forward(lm.model, input_ids, attention_mask, position_ids, None, False)
    sequence = input_ids
    while True:
        next_tokens = sample_next(logits, params, generator)
        yield next_tokens, watch.elapsed()
        if attention_mask is not None:
            if fixed_width:
                attention_mask[:, written] = 1
            else:
                attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(
                    next_tokens), 1))], dim=-1)
            position_ids = position_ids[:, -1:] + 1
        written += 1
        if use_cache:
            logits, cache = decode_step(lm, next_tokens[:, None], cache, attention_mask,
                                        position_ids)
        else:
            sequence = torch.cat([sequence, next_tokens[:, None]], dim=-1)
            full_positions = (positions_from_mask(attention_mask)
                              if attention_mask is not None else None)
            logits, _ = _forward(lm.model, sequence, attention_mask, full_positions, None, False)


def _prompt_tensor(lm: LoadedModel, prompt_ids: list[int], params: SamplingParams):
    check_fits(lm, len(prompt_ids), params)
    return torch.tensor([prompt_ids], dtype=torch.long, device=lm.device)


def stream(lm: LoadedModel, prompt_ids: list[int], params: SamplingParams,
           use_cache: bool = True, kv_cache: str | None = None) -> Iterator[TokenEvent]:
    """Yield each token of one sequence as it is produced, stopping on EOS or the limit."""
    steps = decode_loop(lm, _prompt_tensor(lm, prompt_ids, params), None, params, use_cache,
                        kv_cache)
    try:
        for index in range(params.max_new_tokens):
            tokens, elapsed = next(steps)
            token_id = int(tokens[0])
            yield TokenEvent(index=index, token_id=token_id, time_s=elapsed)
            if ends_sequence(lm, token_id, params):
                return
    finally:
        steps.close()


def build_result(lm: LoadedModel, input_tokens: int, events: list[TokenEvent],
                 params: SamplingParams, engine: str, latency_s: float | None = None
                 ) -> GenerationResult:
    """Assemble the record from per-token events (shared by every engine path)."""
    token_ids = tuple(e.token_id for e in events)
    times = [e.time_s for e in events]
    stopped = bool(token_ids) and ends_sequence(lm, token_ids[-1], params)
    return GenerationResult(
        token_ids=token_ids,
        text=lm.tokenizer.decode(token_ids, skip_special_tokens=True),
        input_tokens=input_tokens,
        output_tokens=len(token_ids),
        ttft_s=times[0],
        decode_times_s=tuple(b - a for a, b in zip(times, times[1:], strict=False)),
        latency_s=times[-1] if latency_s is None else latency_s,
        finish_reason="stop" if stopped else "length",
        engine=engine,
    )


def generate(lm: LoadedModel, prompt_ids: list[int], params: SamplingParams,
             use_cache: bool = True, kv_cache: str | None = None) -> GenerationResult:
    """Our loop: prefill once, then one decode step per token."""
    events = list(stream(lm, prompt_ids, params, use_cache, kv_cache))
    return build_result(lm, len(prompt_ids), events, params, "loop" if use_cache else
                        "loop-nocache")
