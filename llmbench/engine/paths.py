"""The engine paths one request can take from text to result: our loop (with or without the
KV cache) or transformers' `model.generate`, as `llmbench generate` picks them.

Prompt encoding, the choice of path and the cache switch are decided here, in one place. (The
server does not come here: its scheduler batches requests on the loop's `prefill` and
`decode_step`.)
"""

from __future__ import annotations

from llmbench.engine.config import SamplingParams
from llmbench.engine.hf import hf_generate
from llmbench.engine.loop import GenerationResult, generate
from llmbench.engine.models import LoadedModel
from llmbench.engine.prompts import encode
from llmbench.errors import UserError


def run_generation(lm: LoadedModel, prompt: str, params: SamplingParams, engine: str = "loop",
                   use_cache: bool = True, chat: bool = True) -> GenerationResult:
    """Encode `prompt` (chat template when the model has one and `chat`), then generate."""
    prompt_ids = encode(lm.tokenizer, prompt, chat=chat and lm.is_chat)
    if engine == "hf":
        if not use_cache:
            raise UserError("--no-cache applies to the loop engine only: drop it or use "
                            "--engine loop")
        return hf_generate(lm, prompt_ids, params)
    if engine != "loop":
        raise UserError(f"unknown engine {engine!r}: choose loop or hf")
    return generate(lm, prompt_ids, params, use_cache=use_cache)
