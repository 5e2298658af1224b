"""Our prefill/decode loop against transformers' generate: greedy agreement token for token,
cache on/off, static batches, fixed length, EOS, seeded sampling, and the result record."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from llmbench.engine.batching import generate_static_batch, left_pad
from llmbench.engine.config import SamplingParams
from llmbench.engine.hf import hf_generate, hf_generate_batch
from llmbench.engine.loop import (
    TokenEvent,
    check_fits,
    generate,
    positions_from_mask,
    sample_next,
    stream,
)
from llmbench.engine.prompts import encode, exact_length_ids
from llmbench.errors import UserError

QUESTION = "What is the capital of France?"
N_NEW = 12  # new tokens per agreement case: enough to diverge, cheap on smollm2

_memo: dict = {}


def with_extra_eos(lm, token_id: int):
    """A shallow copy of `lm` (same weights) that also stops on `token_id`."""
    return dataclasses.replace(lm, eos_token_ids=lm.eos_token_ids | {token_id})


def question_ids(lm) -> list[int]:
    return encode(lm.tokenizer, QUESTION, chat=True)


def fixed_length(lm, prompt_ids: list[int], n: int = N_NEW) -> tuple[int, ...]:
    """Our loop's greedy ids (ignoring EOS), computed once per model and prompt per worker."""
    key = (lm.name, tuple(prompt_ids), n)
    if key not in _memo:
        params = SamplingParams(max_new_tokens=n, ignore_eos=True)
        _memo[key] = generate(lm, prompt_ids, params).token_ids
    return _memo[key]


def batch_prompts(lm) -> list[list[int]]:
    """Prompts of different lengths, so the batch is left-padded and masked."""
    lengths = (3, 9, 17) if lm.name == "tiny" else (5, 17)
    return [exact_length_ids(lm.tokenizer, n)[-n:] for n in lengths]


# --- greedy agreement ----------------------------------------------------------------------


def test_loop_and_hf_greedy_agree(any_lm):
    prompt = question_ids(any_lm)
    params = SamplingParams(max_new_tokens=N_NEW, ignore_eos=True)
    loop = generate(any_lm, prompt, params)
    ref = hf_generate(any_lm, prompt, params)
    assert loop.token_ids == ref.token_ids
    assert loop.text == ref.text
    assert loop.output_tokens == ref.output_tokens == N_NEW
    assert loop.finish_reason == ref.finish_reason == "length"
    assert (loop.engine, ref.engine) == ("loop", "hf")
    _memo.setdefault((any_lm.name, tuple(prompt), N_NEW), loop.token_ids)


def test_cache_off_matches_cache_on(any_lm):
    prompt = question_ids(any_lm)
    n = N_NEW if any_lm.name == "tiny" else 8  # recomputing everything costs more
    params = SamplingParams(max_new_tokens=n, ignore_eos=True)
    nocache = generate(any_lm, prompt, params, use_cache=False)
    assert nocache.token_ids == fixed_length(any_lm, prompt)[:n]
    assert nocache.engine == "loop-nocache"
    assert nocache.output_tokens == n


def test_static_batch_matches_each_prompt_alone(any_lm):
    prompts = batch_prompts(any_lm)
    n = N_NEW if any_lm.name == "tiny" else 8
    params = SamplingParams(max_new_tokens=n, ignore_eos=True)
    alone = [fixed_length(any_lm, p, n) for p in prompts]
    batch = generate_static_batch(any_lm, prompts, params)
    assert [r.token_ids for r in batch] == alone
    assert [r.input_tokens for r in batch] == [len(p) for p in prompts]
    assert all(r.output_tokens == n and r.finish_reason == "length" for r in batch)


def test_hf_batch_matches_each_prompt_alone(any_lm):
    prompts = batch_prompts(any_lm)
    n = N_NEW if any_lm.name == "tiny" else 8
    params = SamplingParams(max_new_tokens=n, ignore_eos=True)
    alone = [fixed_length(any_lm, p, n) for p in prompts]
    batch = hf_generate_batch(any_lm, prompts, params)
    assert [r.token_ids for r in batch] == alone
    assert all(r.engine == "hf" and r.finish_reason == "length" for r in batch)


def test_static_batch_without_cache_and_without_padding(tiny_lm):
    ragged = batch_prompts(tiny_lm)
    params = SamplingParams(max_new_tokens=6, ignore_eos=True)
    nocache = generate_static_batch(tiny_lm, ragged, params, use_cache=False)
    assert [r.token_ids for r in nocache] == [fixed_length(tiny_lm, p, 6) for p in ragged]
    assert {r.engine for r in nocache} == {"loop-nocache"}
    same_length = [exact_length_ids(tiny_lm.tokenizer, 12)[i:i + 8] for i in (0, 2, 4)]
    batch = generate_static_batch(tiny_lm, same_length, params)
    assert [r.token_ids for r in batch] == [fixed_length(tiny_lm, p, 6) for p in same_length]


# --- fixed length and EOS ------------------------------------------------------------------


@pytest.fixture
def tiny_first_token_eos(tiny_lm, monkeypatch):
    """tiny, with its first greedy token on the question made an EOS id everywhere:
    in our LoadedModel and in the model's own generation and model configs."""
    prompt = question_ids(tiny_lm)
    first = fixed_length(tiny_lm, prompt)[0]
    monkeypatch.setattr(tiny_lm.model.generation_config, "eos_token_id", first)
    monkeypatch.setattr(tiny_lm.model.config, "eos_token_id", first)
    return with_extra_eos(tiny_lm, first), prompt, first


def test_fixed_length_ignores_eos_in_every_engine(tiny_first_token_eos):
    lm, prompt, eos = tiny_first_token_eos
    other = exact_length_ids(lm.tokenizer, 5)
    params = SamplingParams(max_new_tokens=7, ignore_eos=True)
    results = [generate(lm, prompt, params), generate(lm, prompt, params, use_cache=False),
               hf_generate(lm, prompt, params),
               *generate_static_batch(lm, [prompt, other], params),
               *hf_generate_batch(lm, [prompt, other], params)]
    for result in results:
        assert result.output_tokens == len(result.token_ids) == 7, result.engine
        assert result.finish_reason == "length", result.engine
    for result in (results[0], results[1], results[2], results[3], results[5]):
        assert result.token_ids == fixed_length(lm, prompt)[:7]
        assert result.token_ids[0] == eos


def test_eos_as_first_token_stops_after_one(tiny_first_token_eos):
    lm, prompt, eos = tiny_first_token_eos
    params = SamplingParams(max_new_tokens=10)
    events = list(stream(lm, prompt, params))
    assert [e.token_id for e in events] == [eos]
    for result in (generate(lm, prompt, params), hf_generate(lm, prompt, params)):
        assert result.token_ids == (eos,)
        assert result.finish_reason == "stop"
        assert result.decode_times_s == ()
        assert result.decode_ms_per_token is None
        json.dumps(result.to_dict())


def test_eos_mid_sequence_stops_both_engines_at_the_same_token(tiny_lm):
    prompt = question_ids(tiny_lm)
    full = fixed_length(tiny_lm, prompt)
    stop_at = next(i for i in range(3, len(full)) if full[i] not in full[:i])
    lm = with_extra_eos(tiny_lm, full[stop_at])
    params = SamplingParams(max_new_tokens=N_NEW)
    loop, ref = generate(lm, prompt, params), hf_generate(lm, prompt, params)
    assert loop.token_ids == ref.token_ids == full[: stop_at + 1]
    assert loop.finish_reason == ref.finish_reason == "stop"


def test_batch_rows_stop_on_their_own_eos(tiny_lm):
    prompts = batch_prompts(tiny_lm)
    singles = [fixed_length(tiny_lm, p) for p in prompts]
    eos = singles[1][0]  # the middle row's first token
    lm = with_extra_eos(tiny_lm, eos)

    def expected(ids):
        return ids[: ids.index(eos) + 1] if eos in ids else ids

    params = SamplingParams(max_new_tokens=N_NEW)
    for batch in (generate_static_batch(lm, prompts, params),
                  hf_generate_batch(lm, prompts, params)):
        assert [r.token_ids for r in batch] == [expected(s) for s in singles]
        assert batch[1].token_ids == (eos,)
        assert [r.finish_reason for r in batch] == [
            "stop" if eos in s else "length" for s in singles]


def test_smollm2_answers_and_stops_on_eos(smollm2_lm):
    prompt = question_ids(smollm2_lm)
    params = SamplingParams(max_new_tokens=32)
    loop, ref = generate(smollm2_lm, prompt, params), hf_generate(smollm2_lm, prompt, params)
    assert loop.token_ids == ref.token_ids
    assert loop.finish_reason == ref.finish_reason == "stop"
    assert loop.token_ids[-1] in smollm2_lm.eos_token_ids
    assert not set(loop.token_ids[:-1]) & smollm2_lm.eos_token_ids
    assert loop.output_tokens < 32
    assert "Paris" in loop.text
    # With ignore_eos the same tokens come first, then generation runs past the EOS.
    assert loop.output_tokens <= N_NEW
    assert fixed_length(smollm2_lm, prompt)[: loop.output_tokens] == loop.token_ids


# --- seeded sampling -----------------------------------------------------------------------

SAMPLED = SamplingParams(max_new_tokens=16, temperature=0.9, top_k=40, top_p=0.9, seed=1234,
                         ignore_eos=True)


def test_seeded_sampling_reproduces_exactly(tiny_lm):
    prompt = question_ids(tiny_lm)
    first = generate(tiny_lm, prompt, SAMPLED)
    torch.manual_seed(999)  # the request's own generator must not depend on global state
    second = generate(tiny_lm, prompt, SAMPLED)
    assert first.token_ids == second.token_ids
    assert first.output_tokens == 16


def test_different_seeds_give_different_samples(tiny_lm):
    prompt = question_ids(tiny_lm)
    samples = {generate(tiny_lm, prompt, SamplingParams(
        max_new_tokens=8, temperature=1.0, top_k=50, top_p=0.95, seed=seed, ignore_eos=True
    )).token_ids for seed in range(4)}
    assert len(samples) > 1


def test_seeded_sampling_reproduces_in_batches_and_hf(tiny_lm):
    prompts = batch_prompts(tiny_lm)
    first = generate_static_batch(tiny_lm, prompts, SAMPLED)
    second = generate_static_batch(tiny_lm, prompts, SAMPLED)
    assert [r.token_ids for r in first] == [r.token_ids for r in second]
    prompt = question_ids(tiny_lm)
    assert hf_generate(tiny_lm, prompt, SAMPLED).token_ids == hf_generate(
        tiny_lm, prompt, SAMPLED).token_ids


def test_top_k_one_sampling_is_greedy(tiny_lm):
    prompt = question_ids(tiny_lm)
    params = SamplingParams(max_new_tokens=N_NEW, temperature=1.5, top_k=1, seed=7,
                            ignore_eos=True)
    assert generate(tiny_lm, prompt, params).token_ids == fixed_length(tiny_lm, prompt)


def test_unseeded_sampling_runs(tiny_lm):
    params = SamplingParams(max_new_tokens=3, temperature=1.0, ignore_eos=True)
    result = generate(tiny_lm, question_ids(tiny_lm), params)
    assert result.output_tokens == 3
    assert all(0 <= t < len(tiny_lm.tokenizer) for t in result.token_ids)


# --- sample_next on hand-built logits ------------------------------------------------------

LOGITS = torch.tensor([
    [0.1, 2.0, -1.0, 0.5, 1.9, 0.0],
    [3.0, -2.0, 0.0, 2.9, 1.0, -5.0],
    [-1.0, -1.0, -0.5, -3.0, -0.6, -0.7],
])


def _seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_greedy_is_argmax():
    picked = sample_next(LOGITS, SamplingParams(), None)
    assert picked.tolist() == [1, 0, 2]


@pytest.mark.parametrize("temperature", [0.5, 1.0, 10.0])
def test_top_k_one_always_gives_the_argmax(temperature):
    rows = LOGITS.repeat(200, 1)
    params = SamplingParams(temperature=temperature, top_k=1)
    picked = sample_next(rows, params, _seeded())
    assert picked.tolist() == [1, 0, 2] * 200


# 1e-300 and 5e-324 are valid top_p values that float32 rounds to 0.
@pytest.mark.parametrize("top_p", [1e-6, 1e-300, 5e-324])
@pytest.mark.parametrize(("temperature", "top_k"), [(5.0, 0), (1.0, 2), (1e-30, 0), (1e30, 1)])
def test_tiny_top_p_keeps_only_the_best_token(top_p, temperature, top_k):
    rows = LOGITS.repeat(200, 1)
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    assert sample_next(rows, params, _seeded()).tolist() == [1, 0, 2] * 200


def test_top_p_keeps_the_smallest_set_reaching_p():
    # probabilities 0.5, 0.3, 0.2: with top_p 0.6, tokens 0 and 1 cover it; 2 is dropped.
    logits = torch.tensor([[0.5, 0.3, 0.2]]).log().repeat(2000, 1)
    picked = sample_next(logits, SamplingParams(temperature=1.0, top_p=0.6), _seeded())
    assert set(picked.tolist()) == {0, 1}
    picked = sample_next(logits, SamplingParams(temperature=1.0, top_p=0.45), _seeded())
    assert set(picked.tolist()) == {0}


def test_temperature_never_picks_a_token_masked_by_top_k():
    flat = torch.tensor([[0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]]).repeat(4000, 1)
    picked = sample_next(flat, SamplingParams(temperature=100.0, top_k=3), _seeded())
    assert set(picked.tolist()) == {5, 6, 7}  # the three best, each drawn, nothing else


def test_sampling_with_the_same_generator_seed_repeats():
    rows = LOGITS.repeat(50, 1)
    params = SamplingParams(temperature=2.0, top_k=4, top_p=0.9)
    first = sample_next(rows, params, _seeded(3))
    assert torch.equal(first, sample_next(rows, params, _seeded(3)))
    assert first.shape == (150,) and first.dtype == torch.long


# --- the result record ---------------------------------------------------------------------


def _results(lm, n):
    """A result of every path that times each token (the HF batch times only the batch)."""
    prompt = question_ids(lm)
    params = SamplingParams(max_new_tokens=n, ignore_eos=True)
    other = exact_length_ids(lm.tokenizer, 4)
    return [generate(lm, prompt, params), generate(lm, prompt, params, use_cache=False),
            hf_generate(lm, prompt, params), *generate_static_batch(lm, [prompt, other], params)]


def test_generation_result_fields_are_consistent(tiny_lm):
    for result in _results(tiny_lm, 6):
        assert result.output_tokens == len(result.token_ids) == 6
        assert len(result.decode_times_s) == result.output_tokens - 1
        assert result.ttft_s > 0
        assert result.latency_s >= result.ttft_s
        assert all(t >= 0 for t in result.decode_times_s)
        assert result.tokens_per_second > 0
        assert result.text == tiny_lm.tokenizer.decode(result.token_ids,
                                                       skip_special_tokens=True)
        record = json.loads(json.dumps(result.to_dict()))
        assert record["token_ids"] == list(result.token_ids)
        assert record["output_tokens"] == 6
        assert record["finish_reason"] == "length"
        assert record["engine"] == result.engine
        assert record["decode_ms_per_token"] == pytest.approx(
            1000 * sum(result.decode_times_s) / 5)
        assert record["tokens_per_second"] == pytest.approx(6 / result.latency_s)


def test_hf_batch_records_ttft_as_unknown_not_as_the_batch_latency(tiny_lm):
    """`model.generate` on a batch reports no per-token times: TTFT and decode times are
    unknown (None and none), never the whole batch's latency stamped on every token."""
    prompt = question_ids(tiny_lm)
    params = SamplingParams(max_new_tokens=6, ignore_eos=True)
    batch = hf_generate_batch(tiny_lm, [prompt, exact_length_ids(tiny_lm.tokenizer, 4)], params)
    for result in batch:
        assert result.output_tokens == 6 and result.latency_s > 0
        assert result.ttft_s is None
        assert result.decode_times_s == () and result.decode_ms_per_token is None
        record = json.loads(json.dumps(result.to_dict()))
        assert record["ttft_s"] is None and record["decode_ms_per_token"] is None
        assert record["tokens_per_second"] == pytest.approx(6 / result.latency_s)


def test_stream_yields_indexed_events_in_time_order(tiny_lm):
    prompt = question_ids(tiny_lm)
    events = list(stream(tiny_lm, prompt, SamplingParams(max_new_tokens=5, ignore_eos=True)))
    assert all(isinstance(e, TokenEvent) for e in events)
    assert [e.index for e in events] == [0, 1, 2, 3, 4]
    assert tuple(e.token_id for e in events) == fixed_length(tiny_lm, prompt)[:5]
    times = [e.time_s for e in events]
    assert times == sorted(times) and times[0] > 0


# --- prompt checks, padding ----------------------------------------------------------------


def test_prompt_that_does_not_fit_the_context_is_a_user_error(tiny_lm):
    ctx = tiny_lm.context_length
    check_fits(tiny_lm, ctx - 10, SamplingParams(max_new_tokens=10))  # exactly fits
    params = SamplingParams(max_new_tokens=11)
    too_long = [5] * (ctx - 10)
    for call in (lambda: generate(tiny_lm, too_long, params),
                 lambda: hf_generate(tiny_lm, too_long, params),
                 lambda: generate_static_batch(tiny_lm, [[5, 6], too_long], params),
                 lambda: hf_generate_batch(tiny_lm, [[5, 6], too_long], params)):
        with pytest.raises(UserError, match=f"exceeds the model's context of {ctx} tokens"):
            call()


def test_empty_prompt_is_a_user_error(tiny_lm):
    with pytest.raises(UserError, match="prompt is empty"):
        generate(tiny_lm, [], SamplingParams(max_new_tokens=2))


def test_left_pad_and_positions():
    ids, mask = left_pad([[7, 8, 9], [4]], pad_id=0, device=torch.device("cpu"))
    assert ids.tolist() == [[7, 8, 9], [0, 0, 4]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert positions_from_mask(mask).tolist() == [[0, 1, 2], [0, 0, 0]]
    with pytest.raises(ValueError):
        left_pad([], pad_id=0, device=torch.device("cpu"))


@pytest.mark.parametrize("kwargs, match", [
    ({"max_new_tokens": 0}, "max_new_tokens must be at least 1"),
    ({"temperature": -0.1}, "temperature must be a finite number >= 0"),
    ({"temperature": float("nan")}, "temperature must be a finite number"),
    ({"temperature": float("inf")}, "temperature must be a finite number"),
    ({"top_k": -1}, "top_k must be >= 0"),
    ({"top_p": 0.0}, "top_p must be in"),
    ({"top_p": 1.5}, "top_p must be in"),
])
def test_invalid_sampling_params_are_user_errors(kwargs, match):
    with pytest.raises(UserError, match=match):
        SamplingParams(**kwargs)


def test_sample_next_survives_a_vanishing_temperature():
    """A temperature near zero behaves like greedy instead of overflowing to NaN."""
    logits = torch.tensor([[1.0, 3.0, 2.0], [0.5, -1.0, 0.25]])
    for params in (SamplingParams(temperature=1e-40), SamplingParams(temperature=1e-40,
                                                                     top_p=0.5, top_k=2)):
        picked = sample_next(logits, params, torch.Generator().manual_seed(0))
        assert picked.tolist() == [1, 0]
