"""Prompt construction: exact-length token prompts, chat encoding, shipped texts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from llmbench.engine import prompts
from llmbench.errors import UserError

GENERATION_PROMPT = "<|im_start|>assistant\n"  # SmolLM2's (ChatML) assistant turn opener


@pytest.fixture(scope="module")
def tok(tiny_lm):
    return tiny_lm.tokenizer  # SmolLM2's tokenizer, shared by tiny and the @random models


@pytest.mark.parametrize("n", [1, 64, 2048, 5000])
def test_exact_length_ids_has_exactly_n_ids(tok, n):
    ids = prompts.exact_length_ids(tok, n)
    assert len(ids) == n
    assert all(isinstance(i, int) for i in ids)


def test_exact_length_ids_cuts_and_repeats_the_passage(tok):
    base = tok(prompts.passage(), add_special_tokens=False)["input_ids"]
    assert len(base) < 5000  # so 5000 really repeats it
    ids = prompts.exact_length_ids(tok, 5000)
    assert ids[: len(base)] == base
    assert all(ids[i] == base[i % len(base)] for i in range(5000))
    assert prompts.exact_length_ids(tok, 64) == ids[:64]


@pytest.mark.parametrize("n", [0, -3])
def test_exact_length_ids_rejects_fewer_than_one_token(tok, n):
    with pytest.raises(UserError, match=f"at least 1 token, got {n}"):
        prompts.exact_length_ids(tok, n)


def test_chat_encoding_ends_with_the_assistant_generation_prompt(tok):
    question = "What is the capital of France?"
    ids = prompts.encode(tok, question, chat=True)
    suffix = tok(GENERATION_PROMPT, add_special_tokens=False)["input_ids"]
    assert ids[-len(suffix):] == suffix
    text = tok.decode(ids)
    assert text.endswith(GENERATION_PROMPT)
    assert question in text
    assert text.index(question) < text.rindex(GENERATION_PROMPT)


def test_raw_encoding_is_the_plain_tokenizer(tok):
    text = "Plain text, no template."
    ids = prompts.encode(tok, text, chat=False)
    assert ids == list(tok(text, add_special_tokens=True)["input_ids"])
    assert tok.decode(ids) == text


def test_chat_encoding_without_a_template_is_a_user_error():
    no_template = SimpleNamespace(chat_template=None)
    with pytest.raises(UserError, match="no chat template"):
        prompts.encode(no_template, "hi", chat=True)


def test_chat_passage_ids(tok):
    ids = prompts.chat_passage_ids(tok, 200)
    text = tok.decode(ids)
    assert text.endswith(GENERATION_PROMPT)
    assert "Summarise this passage in one sentence." in text
    assert len(ids) > 200


def test_shipped_texts():
    assert len(prompts.passage().split()) > 100
    questions = prompts.questions()
    assert questions and all(q and q == q.strip() for q in questions)


class _CountingTokenizer:
    """Splits the passage into words, numbered; counts how often it was asked."""

    def __init__(self):
        self.calls = 0

    def __call__(self, text, add_special_tokens):
        self.calls += 1
        return {"input_ids": list(range(len(text.split())))}


def test_passage_ids_are_cached_per_tokenizer_and_dropped_with_it():
    first, second = _CountingTokenizer(), _CountingTokenizer()
    assert prompts.exact_length_ids(first, 5) == [0, 1, 2, 3, 4]
    assert prompts.exact_length_ids(first, 3) == [0, 1, 2]
    prompts.exact_length_ids(second, 2)
    assert (first.calls, second.calls) == (1, 1)  # each tokenizer tokenized the passage once
    assert second in prompts._passage_ids
    cached = len(prompts._passage_ids)
    del second  # a later tokenizer can never be served ids cached for this one
    assert len(prompts._passage_ids) == cached - 1


def test_a_tokenizer_that_cannot_be_weakly_referenced_is_tokenized_each_time():
    calls = []

    class NoWeakref(tuple):  # empty __slots__ on a tuple: no room for a weak reference
        __slots__ = ()

        def __call__(self, text, add_special_tokens):
            calls.append(text)
            return {"input_ids": [7, 8, 9]}

    tokenizer = NoWeakref()
    assert prompts.exact_length_ids(tokenizer, 4) == [7, 8, 9, 7]
    assert prompts.exact_length_ids(tokenizer, 1) == [7]
    assert len(calls) == 2
