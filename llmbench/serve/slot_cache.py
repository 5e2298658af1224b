"""A preallocated KV cache for continuous batching: one slot (row) per running sequence, each
written at its own position.

transformers' `StaticCache` writes every row of a batch at one shared position, which suits
a batch that starts together. A server's sequences join and leave at any step, so here each
slot holds one sequence from column 0, and each step writes row i at column `write_at[i]`
(that sequence's length). Attention is told which columns each row may see by a 4D mask
that the caller builds (transformers uses a 4D mask as it is), so no row is ever padded,
shifted or re-packed when another joins.

The tensors are allocated once, [slots, kv heads, max_len, head dim] per layer, and never
change address or shape; a batch of the first k slots is a view of them (`SlotCache.view`),
so a compiled decode step keeps one graph per k. It subclasses `StaticCache`, which is what
routes a decode step to the compiled decoder (`engine.kv_cache.is_static`).
"""

from __future__ import annotations

import torch
from transformers import StaticCache
from transformers.cache_utils import Cache, StaticLayer


class SlotLayer(StaticLayer):
    """One layer's keys and values for k slots; `update` writes row i at `write_at[i]`."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, write_at: torch.Tensor):
        super().__init__(max_cache_len=keys.shape[2])
        self.keys, self.values, self.write_at = keys, values, write_at
        self.rows = torch.arange(keys.shape[0], device=keys.device)
        self.device = keys.device
        self.batch_size, self.num_heads = keys.shape[:2]
        self.k_head_dim, self.v_head_dim = keys.shape[-1], values.shape[-1]
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        # One new position per row ([k, heads, 1, dim]), each at its own column.
        self.keys[self.rows, :, self.write_at] = key_states[:, :, 0]
        self.values[self.rows, :, self.write_at] = value_states[:, :, 0]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        # Rows have lengths of their own; position ids are always passed explicitly.
        return 0


class SlotCache(StaticCache):
    """Every layer's slots (see the module docstring)."""

    def __init__(self, layers: list[SlotLayer]):
        Cache.__init__(self, layers=layers)  # not StaticCache's: the tensors exist already

    @classmethod
    def allocate(cls, model, dtype: torch.dtype, slots: int, max_len: int) -> SlotCache:
        """Zeroed slots for `model`'s keys and values, which it computes in `dtype`: `slots`
        rows of `max_len` positions in every layer."""
        config = model.config.get_text_config()
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        head_dim = (getattr(config, "head_dim", None)
                    or config.hidden_size // config.num_attention_heads)
        parameter = next(model.parameters())
        shape = (slots, heads, max_len, head_dim)
        write_at = torch.zeros(slots, dtype=torch.long, device=parameter.device)
        return cls([SlotLayer(torch.zeros(shape, dtype=dtype, device=parameter.device),
                              torch.zeros(shape, dtype=dtype, device=parameter.device),
                              write_at)
                    for _ in range(config.num_hidden_layers)])

    @property
    def write_at(self) -> torch.Tensor:
        return self.layers[0].write_at

    def view(self, rows: int) -> SlotCache:
        """The first `rows` slots, sharing this cache's memory."""
        return SlotCache([SlotLayer(layer.keys[:rows], layer.values[:rows],
                                    layer.write_at[:rows]) for layer in self.layers])

    def put(self, slot: int, cache, row: int, start: int, length: int) -> None:
        """Copy `length` positions of one sequence's keys and values, from column `start` of
        row `row` of another cache (a prefill's), into `slot`, from column 0."""
        end = start + length
        for layer, source in zip(self.layers, cache.layers, strict=True):
            layer.keys[slot, :, :length] = source.keys[row, :, start:end]
            layer.values[slot, :, :length] = source.values[row, :, start:end]

    def move(self, source: int, target: int, length: int) -> None:
        """Copy slot `source`'s first `length` positions into slot `target`."""
        for layer in self.layers:
            layer.keys[target, :, :length] = layer.keys[source, :, :length]
            layer.values[target, :, :length] = layer.values[source, :, :length]
