"""How far a configuration's greedy tokens agree with a reference's, prompt by prompt.

Lower precision and quantized weights change the numbers, so greedy decoding may pick
another token once two candidates are close; from there on the two continuations are
different texts and comparing them further says nothing. So agreement is measured per
prompt as the number of tokens identical before the first difference, and summarised as
how many prompts agree over the whole length and the shortest and median prefix.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from llmbench.engine.config import SamplingParams

AGREEMENT_PROMPTS = 10
AGREEMENT_PROMPT_TOKENS = 64
AGREEMENT_NEW_TOKENS = 32
PROMPT_STRIDE = 37  # tokens between prompts' starts in the passage, as the suite's batches


@dataclass(frozen=True)
class Agreement:
    """Per prompt, the tokens identical to the reference before the first difference."""

    prefixes: tuple[int, ...]
    length: int  # tokens compared per prompt

    @property
    def identical(self) -> int:
        """Prompts whose tokens agree over the whole length."""
        return sum(p == self.length for p in self.prefixes)

    def to_json(self) -> dict:
        return {"prompts": len(self.prefixes), "tokens": self.length,
                "identical": self.identical, "prefix_min": min(self.prefixes),
                "prefix_median": statistics.median(self.prefixes),
                "prefixes": list(self.prefixes)}

    def __str__(self) -> str:
        return (f"{self.identical}/{len(self.prefixes)} prompts identical over {self.length} "
                f"tokens; tokens before the first difference: min {min(self.prefixes)}, "
                f"median {statistics.median(self.prefixes):g}")


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    pairs = enumerate(zip(a, b, strict=False))
    return next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))


def token_agreement(reference: Sequence[Sequence[int]],
                    candidate: Sequence[Sequence[int]]) -> Agreement:
    """Agreement of `candidate`'s token rows with `reference`'s, row by row."""
    if len(reference) != len(candidate) or not reference:
        raise ValueError(f"need the same number of rows, at least one: {len(reference)} "
                         f"reference, {len(candidate)} candidate")
    length = min(map(len, reference))
    return Agreement(tuple(_common_prefix(r[:length], c[:length])
                           for r, c in zip(reference, candidate, strict=True)), length)


def agreement_prompts(tokenizer, count: int = AGREEMENT_PROMPTS,
                      num_tokens: int = AGREEMENT_PROMPT_TOKENS) -> list[list[int]]:
    """`count` distinct prompts of exactly `num_tokens` ids from the shipped passage."""
    from llmbench.engine.prompts import exact_length_ids

    return [exact_length_ids(tokenizer, num_tokens + i * PROMPT_STRIDE)[i * PROMPT_STRIDE:]
            for i in range(count)]


def greedy_rows(lm, prompts: list[list[int]], new_tokens: int, kv_cache: str) -> list[list[int]]:
    """Each prompt's greedy continuation of exactly `new_tokens` tokens, one at a time (no
    padding, so a row depends on its prompt only)."""
    from llmbench.engine.loop import generate

    params = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    return [generate(lm, prompt, params, kv_cache=kv_cache).token_ids for prompt in prompts]
