"""`torch.compile` of the decode step.

Only decode steps on a static KV cache run compiled. Their shapes are fixed, [batch, 1] new
tokens over a preallocated cache, so one graph serves every step of a request and every
request of the same batch size and length. Prefill, whose shape changes with every prompt,
stays eager, as it does in `model.generate`.

- `fullgraph=True`: a graph break is an error, never a silently slower path.
- `dynamic=False`: one specialised graph per shape, no symbolic sizes.
- `mode="default"` everywhere. CUDA graphs ("reduce-overhead") would cut a small model's
  launch overhead on CUDA, but they replay fixed addresses, and every request here (and
  every `model.generate` call) starts on a new cache: each would record its graphs anew,
  inside the timing, where dynamo's counters cannot see it.
- Every (batch size, cache length) is a shape of its own, and a suite has more of them than
  dynamo's default limit of 8 recompiles per function, past which `fullgraph=True` fails:
  the limit is raised to `RECOMPILE_LIMIT` for processes that compile.

`model.generate` gets the same options through transformers' `CompileConfig`, so the loop
and `generate` are compiled alike. Compiling happens at a shape's first call: callers that
time rounds warm it first (the model fixture, the engines group) and report it apart.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

from llmbench.errors import UserError

# Where inductor can generate code. MPS support in inductor is still experimental in torch.
COMPILE_DEVICES = ("cpu", "cuda")
COMPILE_OPTIONS = {"fullgraph": True, "dynamic": False, "backend": "inductor",
                   "mode": "default"}
RECOMPILE_LIMIT = 64


def _allow_one_graph_per_shape() -> None:
    import torch._dynamo

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit,
                                               RECOMPILE_LIMIT)


def check_compile_supported(device: torch.device) -> None:
    """A user error when `--compile` cannot work on `device`."""
    if device.type not in COMPILE_DEVICES:
        raise UserError(f"--compile is not supported on {device.type}: inductor generates code "
                        f"for {' and '.join(COMPILE_DEVICES)}; drop --compile or pick another "
                        "--device")
    if device.type == "cpu":
        from torch._inductor.cpp_builder import get_cpp_compiler
        from torch._inductor.exc import InvalidCxxCompiler

        try:
            get_cpp_compiler()  # the search inductor itself makes: $CXX, else g++ (Linux)
        except InvalidCxxCompiler:
            raise UserError("--compile on cpu needs the C++ compiler inductor looks for ($CXX, "
                            "else g++ on Linux, clang++ on macOS): install one or drop "
                            "--compile") from None


def compiled_decoder(model: torch.nn.Module, device: torch.device) -> Callable:
    """The model's call, compiled for decode steps (lazily: at each shape's first call)."""
    check_compile_supported(device)
    _allow_one_graph_per_shape()
    return torch.compile(model.__call__, **COMPILE_OPTIONS)


def hf_compile_kwargs() -> dict:
    """`model.generate` arguments that compile its static-cache decoding with the same
    options, on any device (transformers compiles by itself on accelerators only)."""
    from transformers import CompileConfig

    _allow_one_graph_per_shape()
    config = CompileConfig(**COMPILE_OPTIONS)
    config._compile_all_devices = True
    return {"compile_config": config, "disable_compile": False}


@dataclass(frozen=True)
class CompileCounts:
    """dynamo's running totals in this process: graphs compiled and graph breaks met."""

    graphs: int
    graph_breaks: int

    def __sub__(self, other: CompileCounts) -> CompileCounts:
        return CompileCounts(self.graphs - other.graphs, self.graph_breaks - other.graph_breaks)

    def __add__(self, other: CompileCounts) -> CompileCounts:
        return CompileCounts(self.graphs + other.graphs, self.graph_breaks + other.graph_breaks)

    def __str__(self) -> str:
        return f"{self.graphs} graphs compiled, {self.graph_breaks} graph breaks"


def compile_counts() -> CompileCounts | None:
    """The counts now (the difference of two tells what compiled in between); None while
    nothing in the process has imported dynamo, so nothing has compiled (importing it just
    to read zeros costs about a second)."""
    if "torch._dynamo" not in sys.modules:
        return None
    from torch._dynamo.utils import counters

    return CompileCounts(graphs=int(counters["stats"]["unique_graphs"]),
                         graph_breaks=int(sum(counters["graph_break"].values())))


NOTHING_COMPILED = CompileCounts(0, 0)
