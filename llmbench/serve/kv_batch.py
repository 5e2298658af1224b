"""The running batch's KV cache as tensors: join new sequences to it (left-padding whichever
is shorter) and keep a subset of its rows (dropping columns that became padding in every row).

The cache is a transformers `DynamicCache`, [batch, heads, seq, dim] keys and values per layer;
the mask beside it is [batch, seq], 0 marking left padding.
"""

import torch

from llmbench.errors import UserError


def check_batchable(cache, model_name: str) -> None:
    """UserError unless `cache` is a plain DynamicCache, the only layout these helpers know."""
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer) is not DynamicLayer for layer in layers):
        raise UserError(f"{model_name}: continuous batching needs a model whose KV "
                        "cache is a plain DynamicCache (full attention in every layer)")


def keep_rows(cache, mask: torch.Tensor, keep: list[int]):
    """The rows `keep` of a batch's cache and mask, without the columns that are padding in
    every one of them; returns (cache, mask)."""
    index = torch.tensor(keep, device=mask.device)
    mask = mask.index_select(0, index)
    # Columns that are padding in every remaining row carry nothing: drop them.
    first_used = int(mask.any(dim=0).long().argmax())
    kv = [(k.index_select(0, index)[:, :, first_used:],
           v.index_select(0, index)[:, :, first_used:]) for k, v in _layer_kv(cache)]
    return _new_cache(kv), mask[:, first_used:]


def _layer_kv(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def _new_cache(kv: list[tuple[torch.Tensor, torch.Tensor]]):
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=kv)


def _left_pad(t: torch.Tensor, amount: int, dim: int) -> torch.Tensor:
    if amount == 0:
        return t
    shape = list(t.shape)
    shape[dim] = amount
    return torch.cat([t.new_zeros(shape), t], dim=dim)


def merge(cache, mask: torch.Tensor, new_cache, new_mask: torch.Tensor):
    """Append other sequences' cache (rows left-padded as `new_mask` [rows, seq] says) to a
    batch's cache, left-padding whichever is shorter; returns (cache, mask [batch + rows,
    seq])."""
    length, new_len = mask.shape[1], new_mask.shape[1]
    longest = max(length, new_len)
    merged_mask = torch.cat([_left_pad(mask, longest - length, 1),
                             _left_pad(new_mask.to(mask.dtype), longest - new_len, 1)], dim=0)
    kv = [(torch.cat([_left_pad(k, longest - length, 2), _left_pad(nk, longest - new_len, 2)]),
           torch.cat([_left_pad(v, longest - length, 2), _left_pad(nv, longest - new_len, 2)]))
          for (k, v), (nk, nv) in zip(_layer_kv(cache), _layer_kv(new_cache), strict=True)]
    return _new_cache(kv), merged_mask
