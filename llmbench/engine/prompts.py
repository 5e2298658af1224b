"""Prompt construction: chat formatting, exact-length token prompts, shipped texts.

The length sweeps measure "128 input tokens" exactly, so they cut token ids from a passage
the project ships (llmbench/data/passage.txt) rather than counting words.
"""

from __future__ import annotations

import functools
import importlib.resources
import weakref

from llmbench.errors import UserError


@functools.cache
def passage() -> str:
    """The shipped expository passage, original prose written for llmbench."""
    return (importlib.resources.files("llmbench") / "data" / "passage.txt").read_text("utf-8")


@functools.cache
def questions() -> tuple[str, ...]:
    """Short chat questions shipped for load generation."""
    text = (importlib.resources.files("llmbench") / "data" / "questions.txt").read_text("utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def encode(tokenizer, text: str, chat: bool) -> list[int]:
    """Token ids for `text`: through the chat template (with a generation prompt) when
    `chat`, else as raw text. Qwen3's template gets enable_thinking=False; other templates
    ignore the extra variable."""
    if not chat:
        return list(tokenizer(text, add_special_tokens=True)["input_ids"])
    return encode_chat(tokenizer, [{"role": "user", "content": text}])


def encode_chat(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """Token ids for a conversation (`role`/`content` dicts) through the chat template, with
    a generation prompt: the OpenAI-style chat endpoint's input."""
    if not getattr(tokenizer, "chat_template", None):
        raise UserError("this model's tokenizer has no chat template: drop --chat / chat=true")
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, enable_thinking=False,
        return_dict=False,
    )
    if isinstance(ids, dict) or hasattr(ids, "keys"):  # some versions return a BatchEncoding
        ids = ids["input_ids"]
    return list(ids)


# The passage's ids per tokenizer, dropped with the tokenizer: a key by `id()` could be
# reused by another tokenizer after the first is garbage-collected.
_passage_ids: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _passage_ids_of(tokenizer) -> list[int]:
    try:
        return _passage_ids[tokenizer]
    except KeyError:
        pass
    except TypeError:  # not weak-referenceable: nothing safe to key a cache on
        return _tokenize_passage(tokenizer)
    ids = _passage_ids[tokenizer] = _tokenize_passage(tokenizer)
    return ids


def _tokenize_passage(tokenizer) -> list[int]:
    return list(tokenizer(passage(), add_special_tokens=False)["input_ids"])


def exact_length_ids(tokenizer, num_tokens: int) -> list[int]:
    """Exactly `num_tokens` ids cut from the shipped passage, repeating it if needed.

    The ids are cut, not re-tokenized, so the count is exact whatever the tokenizer merges.
    """
    if num_tokens < 1:
        raise UserError(f"a prompt needs at least 1 token, got {num_tokens}")
    base = _passage_ids_of(tokenizer)
    repeats = -(-num_tokens // len(base))
    return (base * repeats)[:num_tokens]


def chat_passage_ids(tokenizer, num_passage_tokens: int) -> list[int]:
    """A chat-formatted request to summarise a passage of about `num_passage_tokens` tokens,
    as a user of a chat model would send it (the input sweep's real-passage case)."""
    excerpt = tokenizer.decode(exact_length_ids(tokenizer, num_passage_tokens))
    return encode(tokenizer, f"Summarise this passage in one sentence.\n\n{excerpt}", chat=True)
