"""transformers' `model.generate`: the baseline path, timed like our own loop.

A streamer records when each token leaves `generate` (after a device sync), so the HF path
reports TTFT and per-token decode times too. Batches go without it (streamers take one row):
their TTFT and decode times are not measured, so they are recorded as unknown (None, no
decode times), never as the whole batch's latency.
"""

from __future__ import annotations

import dataclasses

import torch

from llmbench.engine.compiled import hf_compile_kwargs
from llmbench.engine.config import SamplingParams
from llmbench.engine.kv_cache import hf_generate_kwargs
from llmbench.engine.loop import GenerationResult, TokenEvent, build_result, check_fits
from llmbench.engine.models import LoadedModel
from llmbench.engine.timing import Stopwatch


class _TimingStreamer:
    """Receives the prompt once, then each new token; stamps each token's arrival."""

    def __init__(self, watch: Stopwatch):
        self.watch = watch
        self.times: list[float] = []
        self._seen_prompt = False

    def put(self, value: torch.Tensor) -> None:
        if not self._seen_prompt:
            self._seen_prompt = True
            return
        self.times.append(self.watch.elapsed())

    def end(self) -> None:
        pass


def _generate_kwargs(lm: LoadedModel, params: SamplingParams) -> dict:
    kwargs = {"max_new_tokens": params.max_new_tokens, "pad_token_id": lm.pad_token_id,
              "do_sample": not params.is_greedy}
    if params.is_greedy:
        # Cleared so a model's default sampling settings do not trigger warnings.
        kwargs.update(temperature=None, top_k=None, top_p=None)
    else:
        kwargs.update(temperature=params.temperature, top_k=params.top_k or None,
                      top_p=params.top_p)
    if params.ignore_eos:
        # Suppressing EOS would change the logits; instead, never stop on it, exactly like
        # our loop with ignore_eos.
        kwargs.update(eos_token_id=None, min_new_tokens=None)
    else:
        kwargs["eos_token_id"] = sorted(lm.eos_token_ids)
    return kwargs


@torch.inference_mode()
def _run(lm: LoadedModel, input_ids, attention_mask, params: SamplingParams, streamer,
         kv_cache: str | None):
    if params.seed is not None:
        torch.manual_seed(params.seed)  # HF samples from the global generator
    kind = kv_cache or lm.kv_cache
    cache_kwargs = hf_generate_kwargs(kind)
    if kind == "static":
        # generate sizes a static cache for the longest request it has seen on this model
        # (grow-only, to spare recompiles), so a case's cost would depend on the cases before
        # it. Forgetting that length sizes it for this request, as our loop does.
        vars(lm.model).pop("_previous_max_cache_length", None)
    if lm.compiled_decoder is not None and kind == "static":
        cache_kwargs.update(hf_compile_kwargs())  # compiled as our loop is
    return lm.model.generate(input_ids=input_ids, attention_mask=attention_mask,
                             streamer=streamer, **_generate_kwargs(lm, params), **cache_kwargs)


def hf_generate(lm: LoadedModel, prompt_ids: list[int], params: SamplingParams,
                kv_cache: str | None = None) -> GenerationResult:
    """One sequence through `model.generate`, with per-token timestamps. `kv_cache`: the
    cache kind (`llmbench.engine.kv_cache`); None: the model's default."""
    check_fits(lm, len(prompt_ids), params)
    input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=lm.device)
    attention_mask = torch.ones_like(input_ids)
    watch = Stopwatch(lm.device)
    streamer = _TimingStreamer(watch)
    output = _run(lm, input_ids, attention_mask, params, streamer, kv_cache)
    latency = watch.elapsed()
    new_ids = output[0, input_ids.shape[1]:].tolist()
    if not params.ignore_eos:
        new_ids = _cut_after_eos(new_ids, lm.eos_token_ids)
    assert len(new_ids) == len(streamer.times), (len(new_ids), len(streamer.times))
    events = [TokenEvent(i, t, s)
              for i, (t, s) in enumerate(zip(new_ids, streamer.times, strict=True))]
    return build_result(lm, len(prompt_ids), events, params, "hf", latency_s=latency)


def _cut_after_eos(ids: list[int], eos: frozenset[int]) -> list[int]:
    for i, token in enumerate(ids):
        if token in eos:
            return ids[: i + 1]
    return ids


def hf_generate_batch(lm: LoadedModel, prompts: list[list[int]], params: SamplingParams,
                      kv_cache: str | None = None) -> list[GenerationResult]:
    """A left-padded static batch through `model.generate`. Only the batch's latency is
    measured: each result's TTFT is None and it has no decode times."""
    from llmbench.engine.batching import left_pad

    for prompt in prompts:
        check_fits(lm, len(prompt), params)
    input_ids, attention_mask = left_pad(prompts, lm.pad_token_id, lm.device)
    watch = Stopwatch(lm.device)
    output = _run(lm, input_ids, attention_mask, params, None, kv_cache)
    latency = watch.elapsed()
    results = []
    for row, prompt in zip(output[:, input_ids.shape[1]:].tolist(), prompts, strict=True):
        ids = row if params.ignore_eos else _cut_after_eos(row, lm.eos_token_ids)
        events = [TokenEvent(i, t, latency) for i, t in enumerate(ids)]
        result = build_result(lm, len(prompt), events, params, "hf", latency_s=latency)
        results.append(dataclasses.replace(result, ttft_s=None, decode_times_s=()))
    return results
