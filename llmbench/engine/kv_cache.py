"""The KV cache our loop decodes on.

- `dynamic`: transformers' `DynamicCache`, which the model creates when given none. Each
  decode step appends one position to every layer's keys and values, so the tensors grow
  (reallocated and copied) and their shapes change from step to step.
- `static`: transformers' `StaticCache`, preallocated for the prompt plus every token the
  request may generate, and written in place. Its shapes never change, which is what
  `torch.compile` needs to keep one graph across decode steps; in exchange, attention spans
  the whole preallocated length (the unused tail masked out) on every step.

transformers' own class is used rather than one of ours: it is the cache `model.generate`
uses with `cache_implementation="static"`, so both engines run on the same data structure.
"""

from __future__ import annotations

from llmbench.engine.config import KV_CACHES


def new_cache(model, kind: str, max_len: int):
    """A fresh cache of `kind` able to hold `max_len` positions per row, or None for
    `dynamic` (the model then makes its own)."""
    if kind == "dynamic":
        return None
    if kind == "static":
        from transformers import StaticCache

        return StaticCache(config=model.config, max_cache_len=max_len)
    raise ValueError(f"unknown KV cache {kind!r}: one of {', '.join(KV_CACHES)}")


def is_static(cache) -> bool:
    """Whether `cache` is a preallocated one, of fixed shapes (a compiled decode step runs
    on it). Not `Cache.is_compileable`: that holds for some growing caches too."""
    if cache is None:
        return False
    from transformers import StaticCache

    return isinstance(cache, StaticCache)


def full_width_mask(attention_mask, max_len: int):
    """A [batch, seq] padding mask widened to [batch, max_len], the new columns 0. A static
    cache attends over all `max_len` positions; the caller marks each new position with 1
    in place as it is written, so the mask's shape never changes between steps."""
    wide = attention_mask.new_zeros((attention_mask.shape[0], max_len))
    wide[:, :attention_mask.shape[1]] = attention_mask
    return wide


def hf_generate_kwargs(kind: str) -> dict:
    """The `model.generate` arguments for the same cache. Its automatic compilation of
    static-cache decoding (on CUDA) is turned off: `static` means the cache, nothing more."""
    if kind == "dynamic":
        return {}
    if kind == "static":
        return {"cache_implementation": "static", "disable_compile": True}
    raise ValueError(f"unknown KV cache {kind!r}: one of {', '.join(KV_CACHES)}")
