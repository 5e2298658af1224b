"""The linear layers' weights of a loaded model: native, prepacked, or weight-only quantized
through torchao.

- `native`: the weights stay in the model's dtype.
- `packed`: the same values, reordered once for oneDNN's CPU kernel (`llmbench.engine.packed`).
- `int8`: one int8 per weight, one scale per output row (torchao's `Int8WeightOnlyConfig`).
- `int4`: two weights per byte, a scale and zero point per group of input columns. On the CPU
  this is torchao's tinygemm CPU layout (`PrototypeInt4WeightOnlyConfig`, the kernel
  `aten._weight_int4pack_mm_for_cpu`); on CUDA its tinygemm tile layout, which needs
  bfloat16 activations.

Activations stay in the model's dtype. Decoding a small model is bound by reading the
weights once per token, so fewer bytes per weight is where the speed would come from; it
comes only where the dequantization is fused into the matmul, by a kernel made for it or
by `torch.compile`. So on a CPU, int8 and int4 weights may decode slower than native
float32 on float32 activations and faster on bfloat16 ones (figures:
docs/measurements/2026-12-01-engine-configurations.md): the engines group measures by how
much on yours, and `llmbench agreement` how far their greedy tokens stray from float32's.

torchao's configs can also retune inductor process-wide (`set_inductor_config`); that is
turned off, so quantizing one model never changes how another, unquantized, compiles.
"""

from __future__ import annotations

import logging
import warnings

import torch

from llmbench.engine.config import WEIGHTS
from llmbench.engine.packed import check_packed_supported, pack_linear_weights
from llmbench.errors import UserError

QUANTIZED_DEVICES = ("cpu", "cuda")
# The int4 group sizes torchao's kernels take, largest (fewest scales to read) first; the
# largest that divides every quantized layer's input width is used.
INT4_GROUP_SIZES = (128, 64, 32)
INSTALL_HINT = "pip install torchao==0.18.0 (or llmbench[quant])"


def _not_import_noise(record: logging.LogRecord) -> bool:
    message = record.getMessage()
    return not ("register_constant()" in message or message.startswith("Failed to load ")
                and ".so" in message)


def silence_torchao_import() -> None:
    """torchao, once installed, is imported by transformers whenever a model loads, quantized
    or not. Its CPU build logs a warning for each CUDA extension it cannot load, and torch
    one for each of torchao's enums it registers (some only when first used): noise, not
    news, on every command. Filters, not levels: torch resets its loggers' levels when
    dynamo loads. Idempotent."""
    for name in ("torchao", "torch.utils._pytree"):
        logger = logging.getLogger(name)
        if _not_import_noise not in logger.filters:
            logger.addFilter(_not_import_noise)


def check_weights_supported(weights: str, device: torch.device, dtype: torch.dtype) -> None:
    """A user error when `--weights weights` cannot run on `device` in `dtype`, raised
    before a model is loaded."""
    if weights not in WEIGHTS:
        raise UserError(f"unknown weights {weights!r}: choose one of {', '.join(WEIGHTS)}")
    if weights == "native":
        return
    if weights == "packed":
        check_packed_supported(device, dtype)
        return
    if device.type not in QUANTIZED_DEVICES:
        raise UserError(f"--weights {weights} is not supported on {device.type}: torchao's "
                        f"weight-only kernels run on {' and '.join(QUANTIZED_DEVICES)}; use "
                        "--weights native or another --device")
    if weights == "int4" and device.type == "cuda" and dtype != torch.bfloat16:
        raise UserError("--weights int4 on cuda needs --dtype bfloat16 (torchao's tinygemm "
                        "kernel takes bfloat16 activations only)")
    silence_torchao_import()
    try:
        import torchao  # noqa: F401
    except ImportError:
        raise UserError(f"--weights {weights} needs torchao: {INSTALL_HINT}") from None


def _linear_widths(model: torch.nn.Module) -> set[int]:
    return {m.in_features for m in model.modules() if isinstance(m, torch.nn.Linear)}


def int4_group_size(model: torch.nn.Module) -> int:
    """The largest supported group size that divides every linear layer's input width (a
    layer it does not divide would silently stay unquantized)."""
    widths = _linear_widths(model)
    for size in INT4_GROUP_SIZES:
        if all(width % size == 0 for width in widths):
            return size
    raise UserError(f"--weights int4 cannot quantize this model: its linear layers' input "
                    f"widths {sorted(widths)} are not all multiples of "
                    f"{min(INT4_GROUP_SIZES)}; use --weights int8")


def _config(weights: str, model: torch.nn.Module, device: torch.device):
    from torchao.quantization import Int4WeightOnlyConfig, Int8WeightOnlyConfig

    if weights == "int8":
        return Int8WeightOnlyConfig(set_inductor_config=False)
    group_size = int4_group_size(model)
    if device.type == "cpu":
        from torchao.prototype.quantization.int4 import PrototypeInt4WeightOnlyConfig

        return PrototypeInt4WeightOnlyConfig(group_size=group_size, set_inductor_config=False)
    return Int4WeightOnlyConfig(group_size=group_size, int4_packing_format="tile_packed_to_4d",
                                set_inductor_config=False)


def quantize_weights(model: torch.nn.Module, weights: str, device: torch.device) -> dict:
    """Quantize every linear layer of `model` (on `device`, in its final dtype) in place;
    returns what a baseline records of it ({} for native weights)."""
    if weights == "native":
        return {}
    check_weights_supported(weights, device, next(model.parameters()).dtype)
    if weights == "packed":
        return pack_linear_weights(model)
    config = _config(weights, model, device)
    layers = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    from torchao.quantization import quantize_

    quantize_(model, config)
    if weights == "int4":
        # Compiling int4 weights warns that their graphs cannot enter AOTAutograd's on-disk
        # cache: true (int4 compiles cold in every process, see docs/engines.md), and
        # nothing a user of llmbench can act on.
        warnings.filterwarnings("ignore", message=".*does not implement "
                                "_stable_hash_for_caching")
    recorded = {"weights": weights, "quantized_linear_layers": layers}
    if weights == "int4":
        recorded["group_size"] = config.group_size
    return recorded
