"""Linear weights prepacked once for oneDNN's blocked layout, in eager mode.

A decode step at batch 1 is a chain of matrix-vector products: every weight is read once
per token, so the step is bound by how fast the matmul kernel streams the weights. With
the weights in PyTorch's plain row-major layout, `aten::addmm` reaches a fraction of the
CPU's read bandwidth. Reordered once, at load time, into oneDNN's blocked layout
(`mkldnn::_reorder_linear_weight`) and multiplied by oneDNN's linear kernel
(`mkldnn::_linear_pointwise`), the same weights can stream faster, on CPUs where oneDNN's
kernel beats ATen's; on others it is slower, so whether it pays is measured, never assumed
(the suite's engines group times it beside native weights). This is what inductor does to a
model's linear layers when it freezes a graph; done here, in eager mode, it needs no compile
and leaves the numbers alone: the weights keep their dtype and values.

The packed layout is chosen for a batch size (`PACKED_FOR_BATCH`, the decode step's); other
batch sizes, a prefill's included, run on it correctly.

Limits, each a user error before anything loads (`check_packed_supported`):
- the CPU only: oneDNN is PyTorch's CPU backend;
- bfloat16 and float16 only where oneDNN has a path for them on this CPU (it refuses to
  reorder the weights otherwise);
- eager only: inductor lowers oneDNN's linear only for weights it packed itself, so a packed
  weight as a graph input fails to compile.
"""

from __future__ import annotations

import torch

from llmbench.engine import cpu_features
from llmbench.errors import UserError

PACKED_DEVICES = ("cpu",)
PACKED_FOR_BATCH = 1  # the layout is tuned for decode's batch-1 matrix-vector products


class PackedLinear(torch.nn.Module):
    """`nn.Linear`'s forward on a weight reordered once into oneDNN's layout."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        # An opaque oneDNN tensor: a buffer, not a parameter (nothing trains it), and not
        # saved with the model (a state dict of it would not load into an nn.Linear).
        self.register_buffer("packed_weight", torch.ops.mkldnn._reorder_linear_weight(
            linear.weight.detach(), PACKED_FOR_BATCH), persistent=False)
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none",
                                                  [], "")

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, layout=onednn")


def check_packed_supported(device: torch.device, dtype: torch.dtype = torch.float32) -> None:
    """Raise a user error when `--weights packed` cannot run on `device` in `dtype`.
    (`--compile` with it is refused by `EngineConfig`, whatever the device.)"""
    if device.type not in PACKED_DEVICES:
        raise UserError(f"--weights packed is not supported on {device.type}: it prepacks "
                        "weights for oneDNN, PyTorch's CPU backend; use --weights native")
    if not torch.backends.mkldnn.is_available():
        raise UserError("--weights packed needs a PyTorch built with oneDNN (mkldnn), which "
                        "this one is not; use --weights native")
    feature = cpu_features.ONEDNN_HALF.get(dtype)
    why = cpu_features.missing(feature) if feature is not None else None
    if why is not None:
        name = str(dtype).removeprefix("torch.")
        raise UserError(f"--weights packed in {name} needs oneDNN's {name} path: {why}; use "
                        "--dtype float32 or --weights native")


def pack_linear_weights(model: torch.nn.Module) -> dict:
    """Replace every `nn.Linear` of `model` by a `PackedLinear` in place (the model on the
    CPU, in its final dtype); returns what a baseline records of it."""
    layers = 0
    with torch.no_grad():
        for module in list(model.modules()):
            for name, child in list(module.named_children()):
                if type(child) is torch.nn.Linear:
                    setattr(module, name, PackedLinear(child))
                    layers += 1
    # A tied output layer shared its weight with the input embedding: the embedding keeps
    # the plain copy it gathers rows from, the output layer reads the packed one.
    return {"weights": "packed", "packed_linear_layers": layers,
            "packed_for_batch": PACKED_FOR_BATCH}
