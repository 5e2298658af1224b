"""The attention implementation a loaded model runs, switched in place (no reload).

- `sdpa`: transformers' wrapper around `torch.nn.functional.scaled_dot_product_attention`,
  which picks a fused kernel where the device has one (flash or memory-efficient), else
  PyTorch's math path;
- `eager`: transformers' own matmul, softmax, matmul, in Python.

Both run on every device; implementations that need a package or a GPU (flash-attention 2,
flex attention) are not offered.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from llmbench.errors import UserError


def attention_of(model) -> str:
    """The implementation `model` runs now."""
    return str(model.config._attn_implementation)


def set_attention(model, name: str) -> None:
    """Make `model` run attention `name`; a user error if its architecture cannot."""
    if attention_of(model) == name:
        return
    try:
        model.set_attn_implementation(name)
    except (ValueError, ImportError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"{type(model).__name__} cannot run --attn {name} ({reason}): pick "
                        "another --attn") from None
    if attention_of(model) != name:
        raise UserError(f"{type(model).__name__} cannot switch its attention to {name}: it "
                        "does not use transformers' attention interface; pick another --attn")


@contextlib.contextmanager
def attention(model, name: str) -> Iterator[None]:
    """Run the block with attention `name`, then switch back to what it was."""
    before = attention_of(model)
    set_attention(model, name)
    try:
        yield
    finally:
        set_attention(model, before)
