"""The continuous-batching scheduler: batched outputs equal single-request outputs, requests
join a running batch, cancellation frees the slot, and the edge cases of finishing. Every
test runs on each kind of running batch: growing caches, a static cache's slots, and those
slots decoded by compiled steps."""

import dataclasses
import time

import pytest

from llmbench.engine.config import EngineConfig, SamplingParams
from llmbench.engine.loop import TokenEvent, generate
from llmbench.engine.models import load_model
from llmbench.engine.prompts import encode, exact_length_ids
from llmbench.errors import UserError
from llmbench.serve import admission
from llmbench.serve.request import Outcome
from llmbench.serve.scheduler import Scheduler, SchedulerFull

# Compiled steps share dynamo's caches with the other compiling tests: one worker runs them.
pytestmark = pytest.mark.xdist_group("inductor-compile")
# Slots long enough for the longest request below (4000 new tokens, cancelled early).
MAX_CONTEXT = 4200


@pytest.fixture(scope="module")
def reference():
    """The tiny random model: real tokenizer, ~1 s to load, wide greedy margins; decoding
    each request alone on the eager loop gives the tokens every batch must reproduce."""
    return load_model(EngineConfig(model="tiny", device="cpu"))


@pytest.fixture(scope="module", params=["dynamic", "static", "compiled"])
def lm(request, reference):
    """The same model served on each kind of batch."""
    if request.param == "dynamic":
        return reference
    return load_model(EngineConfig(model="tiny", device="cpu", kv_cache="static",
                                   compile=request.param == "compiled"))


def _scheduler(lm, **kw) -> Scheduler:
    return Scheduler(lm, max_context=MAX_CONTEXT, **kw)


@pytest.fixture
def scheduler(lm):
    """A started scheduler with room for 8 rows, closed after the test."""
    s = _scheduler(lm, max_batch_size=8, max_waiting=64)
    s.start()
    yield s
    s.close()


def _drain(request) -> tuple[list[int], Outcome]:
    items = list(request)
    assert isinstance(items[-1], Outcome)
    assert all(isinstance(i, TokenEvent) for i in items[:-1])
    assert [i.index for i in items[:-1]] == list(range(len(items) - 1))
    return [i.token_id for i in items[:-1]], items[-1]


def _wait_until(predicate, what: str, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)


def _workload(lm, count: int):
    """Prompts of different lengths (chat and raw) and different output lengths."""
    prompts = [encode(lm.tokenizer, f"Question {i}: {'why ' * i}is the sky blue?", chat=i % 2 == 0)
               if i % 3 else exact_length_ids(lm.tokenizer, 5 + 7 * i) for i in range(count)]
    params = [SamplingParams(max_new_tokens=3 + (5 * i) % 17, ignore_eos=True)
              for i in range(count)]
    return prompts, params


def test_sixteen_concurrent_greedy_requests_equal_each_served_alone(lm, reference, scheduler):
    prompts, params = _workload(lm, 16)
    alone = [generate(reference, p, sp).token_ids for p, sp in zip(prompts, params, strict=True)]
    first = [scheduler.submit(p, sp) for p, sp in zip(prompts[:6], params[:6], strict=True)]
    # The rest arrive once the first batch is decoding, so they join a running batch, and
    # more than max_batch_size are in flight, so some wait for a free slot.
    _wait_until(lambda: scheduler.stats.num_steps >= 2, "the first decode steps")
    rest = [scheduler.submit(p, sp) for p, sp in zip(prompts[6:], params[6:], strict=True)]
    for request, expected, sp in zip(first + rest, alone, params, strict=True):
        tokens, outcome = _drain(request)
        assert tuple(tokens) == expected
        assert outcome == Outcome("length", len(request.prompt_ids), sp.max_new_tokens,
                                  outcome.latency_s)
    assert scheduler.stats.peak_batch_size == 8
    assert scheduler.stats.num_finished == 16
    _wait_until(lambda: scheduler.num_active == 0, "the batch to empty")


def test_requests_that_arrive_together_are_prefilled_in_one_pass(lm, reference, scheduler,
                                                                 monkeypatch):
    passes = []
    real_prefill = admission.prefill
    monkeypatch.setattr(admission, "prefill", lambda lm, ids, *a: passes.append(ids.shape)
                        or real_prefill(lm, ids, *a))
    prompts, params = _workload(lm, 5)
    with scheduler._cond:  # the scheduler thread admits nothing until all five wait
        requests = [scheduler.submit(p, sp) for p, sp in zip(prompts, params, strict=True)]
    for request, prompt, sp in zip(requests, prompts, params, strict=True):
        assert tuple(_drain(request)[0]) == generate(reference, prompt, sp).token_ids
    assert passes == [(5, max(map(len, prompts)))]  # one left-padded pass for all five
    assert scheduler.stats.peak_batch_size == 5


def test_a_failed_group_admission_fails_only_the_request_that_cannot_run(lm, scheduler,
                                                                         monkeypatch):
    real_prefill = admission.prefill

    def prefill(lm, ids, *a):
        if ids.shape[1] == 13:  # only the poisoned prompt's length: fails in any group
            raise RuntimeError("out of memory")
        return real_prefill(lm, ids, *a)

    monkeypatch.setattr(admission, "prefill", prefill)
    prompts = [exact_length_ids(lm.tokenizer, n) for n in (5, 13, 7)]
    params = SamplingParams(max_new_tokens=3, ignore_eos=True)
    with scheduler._cond:
        requests = [scheduler.submit(p, params) for p in prompts]
    outcomes = [_drain(r)[1] for r in requests]
    assert [o.finish_reason for o in outcomes] == ["length", "error", "length"]
    assert outcomes[1].error == "RuntimeError: out of memory"


def test_seeded_sampling_in_a_batch_equals_sampling_alone(lm, reference, scheduler):
    prompts, _ = _workload(lm, 4)
    sampled = SamplingParams(max_new_tokens=12, temperature=0.8, top_k=50, top_p=0.9, seed=7,
                             ignore_eos=True)
    greedy = SamplingParams(max_new_tokens=12, ignore_eos=True)
    expected = generate(reference, prompts[0], sampled).token_ids
    with scheduler._cond:  # all four join at once: the sampled one is prefilled in a group
        requests = [scheduler.submit(prompts[0], sampled)]
        requests += [scheduler.submit(p, greedy) for p in prompts[1:]]
    assert tuple(_drain(requests[0])[0]) == expected
    for request, prompt in zip(requests[1:], prompts[1:], strict=True):
        assert tuple(_drain(request)[0]) == generate(reference, prompt, greedy).token_ids


def test_cancel_frees_the_slot_and_the_scheduler_keeps_serving(lm, scheduler):
    prompt = encode(lm.tokenizer, "Tell me a long story.", chat=True)
    long = scheduler.submit(prompt, SamplingParams(max_new_tokens=4000, ignore_eos=True))
    items = iter(long)
    assert isinstance(next(items), TokenEvent) and isinstance(next(items), TokenEvent)
    long.cancel()
    rest = list(items)
    assert rest[-1].finish_reason == "cancelled"
    assert rest[-1].output_tokens < 4000
    _wait_until(lambda: scheduler.num_active == 0, "the cancelled row to leave")
    assert scheduler.stats.num_cancelled == 1
    tokens, outcome = _drain(scheduler.submit(prompt, SamplingParams(max_new_tokens=4,
                                                                      ignore_eos=True)))
    assert len(tokens) == 4 and outcome.finish_reason == "length"


def test_eos_finishes_with_stop_unless_ignored(lm, reference):
    prompt = encode(lm.tokenizer, "Hello", chat=True)
    first = generate(reference, prompt, SamplingParams(max_new_tokens=1)).token_ids[0]
    # Pretend the model's first greedy token is its EOS.
    eos_lm = dataclasses.replace(lm, eos_token_ids=frozenset({first}))
    scheduler = _scheduler(eos_lm, max_batch_size=2, max_waiting=4)
    try:
        tokens, outcome = _drain(scheduler.submit(prompt, SamplingParams(max_new_tokens=5)))
        assert (tokens, outcome.finish_reason) == ([first], "stop")
        params = SamplingParams(max_new_tokens=5, ignore_eos=True)
        tokens, outcome = _drain(scheduler.submit(prompt, params))
        assert (len(tokens), outcome.finish_reason) == (5, "length")
    finally:
        scheduler.close()


def test_single_token_requests_never_join_the_batch(lm, scheduler):
    prompts, _ = _workload(lm, 3)
    requests = [scheduler.submit(p, SamplingParams(max_new_tokens=1)) for p in prompts]
    assert [len(_drain(r)[0]) for r in requests] == [1, 1, 1]
    assert scheduler.stats.num_steps == 0


def test_submit_rejects_what_cannot_fit_or_wait(lm):
    scheduler = _scheduler(lm, max_batch_size=1, max_waiting=0)
    try:
        with pytest.raises(UserError, match="exceeds the model's context of 8192 tokens"):
            scheduler.submit([1] * 8190, SamplingParams(max_new_tokens=3))
        with pytest.raises(UserError, match="prompt is empty"):
            scheduler.submit([], SamplingParams())
        with pytest.raises(SchedulerFull):
            scheduler.submit([1, 2], SamplingParams(max_new_tokens=1))
    finally:
        scheduler.close()
    with pytest.raises(UserError, match="max_batch_size"):
        Scheduler(lm, max_batch_size=0, max_waiting=1)


def test_close_ends_running_requests_as_cancelled(lm):
    scheduler = _scheduler(lm, max_batch_size=2, max_waiting=4)
    request = scheduler.submit([1, 2, 3], SamplingParams(max_new_tokens=4000, ignore_eos=True))
    items = iter(request)
    next(items)
    scheduler.close()
    assert list(items)[-1].finish_reason == "cancelled"


@pytest.mark.parametrize("reason, is_failure", [("stop", False), ("length", False),
                                                ("cancelled", True), ("error", True)])
def test_only_cancelled_and_failed_outcomes_are_failures(reason, is_failure):
    assert Outcome(reason, 3, 1, 0.1).is_failure is is_failure
