"""Counted work: what one call asks the device to do, whatever the clock says.

`count_work(fn)` runs `fn` once and counts, at the dispatcher, every aten op it reaches:
- ops dispatched, by name (`aten::addmm`), from a `TorchDispatchMode`. They are counted
  after composite ops are decomposed (`aten::linear` becomes `aten::t` + `aten::addmm`), the
  level at which kernels run, so attention falling back from a fused kernel to the math
  path (bmm, softmax, bmm) shows as the ops it really runs;
- FLOPs, by the formulas of `torch.utils.flop_counter` (FlopCounterMode's: matmuls,
  convolutions and attention kernels; element-wise ops count no FLOPs there). Its table
  lacks the CPU flash-attention kernel, so that one gets the formula PyTorch uses for the
  CUDA kernels, and the linear kernels of packed and int4 weights (oneDNN's, tinygemm's
  CPU one), which get a matmul's 2 * M * N * K;
- bytes: each op that computes reads its input tensors and writes its outputs, counted
  from their sizes. A view (`aten::view`, `aten::t`, a slice) moves nothing and counts 0;
- for compiled code, the graph breaks and the graphs compiled while it ran (dynamo's own
  counters): after warm-up, a graph compiled in a counted round is a recompile.

The dispatcher sits below every backend, so the counts mean the same on CPU, CUDA and MPS,
and a deterministic program (same shapes, same control flow) gives the same counts on any
machine and any number of threads. That is what makes them a second verdict beside time:
a change that makes the code do more shows up exactly, in one run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry, sdpa_flop_count

from llmbench.engine.compiled import NOTHING_COMPILED, compile_counts


def _attention_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs):
    """FLOPs of one fused attention call, as PyTorch counts its CUDA kernels."""
    return sdpa_flop_count(query_shape, key_shape, value_shape)


# PyTorch's FLOP formulas (those of torch.utils.flop_counter.FlopCounterMode), by op
# packet, taking shapes, plus the CPU and MPS attention kernels they lack (each would count 0).
# The registry wraps each formula to map tensors to shapes with pytree; unwrapped and fed
# shapes directly (`_shapes`), counting costs a fraction of that.
_FLOP_FORMULAS = {packet: getattr(formula, "__wrapped__", None) or formula
                  for packet, formula in flop_registry.items()}
for _kernel in ("_scaled_dot_product_flash_attention_for_cpu",  # CPU
                "_scaled_dot_product_attention_math_for_mps"):  # Apple GPUs
    if hasattr(torch.ops.aten, _kernel):  # each takes (query, key, value, ...) first
        _FLOP_FORMULAS[getattr(torch.ops.aten, _kernel)] = _attention_flops


def _linear_flops(x_shape, *args, out_shape=None, **kwargs):
    """FLOPs of a linear kernel on a packed weight, whose shape may not say N or K: the
    output's elements (M * N) times the input's width (K), a multiply and an add each."""
    return 2 * math.prod(out_shape) * x_shape[-1]


for _packet in (getattr(torch.ops.mkldnn, "_linear_pointwise", None),  # --weights packed
                getattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu", None)):  # int4, CPU
    if _packet is not None:
        _FLOP_FORMULAS[_packet] = _linear_flops
# Registered with get_raw (no shape wrapper): these take the tensors themselves.
_RAW = {packet for packet, formula in flop_registry.items()
        if not hasattr(formula, "__wrapped__")}


def _shapes(value):
    if isinstance(value, torch.Tensor):
        return value.shape
    if isinstance(value, (list, tuple)):
        return type(value)(_shapes(v) for v in value) if not hasattr(value, "_fields") else value
    return value


_COMPOSITE = torch._C.DispatchKey.CompositeImplicitAutograd


@dataclass(frozen=True)
class WorkCount:
    """The work of one call. `graphs_compiled`/`graph_breaks` are None when nothing in the
    process has used torch.compile (dynamo was never imported)."""

    ops: dict[str, int] = field(default_factory=dict)  # aten op name -> times dispatched
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    graphs_compiled: int | None = None
    graph_breaks: int | None = None

    @property
    def num_ops(self) -> int:
        return sum(self.ops.values())

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    def to_json(self) -> dict:
        return {"num_ops": self.num_ops, "flops": self.flops, "bytes_read": self.bytes_read,
                "bytes_written": self.bytes_written, "graphs_compiled": self.graphs_compiled,
                "graph_breaks": self.graph_breaks, "ops": dict(sorted(self.ops.items()))}


def _tensor_bytes(values) -> int:
    """Bytes of the tensors among `values` (a sequence of arguments or results; lists and
    tuples of tensors count what they hold). Per op dispatched, so kept lean."""
    total = 0
    for value in values:
        if isinstance(value, torch.Tensor):
            total += value.nbytes
        elif isinstance(value, (list, tuple)):
            total += _tensor_bytes(value)
    return total


class _WorkCounter(TorchDispatchMode):
    """Counts each aten op that reaches the dispatcher, its FLOPs and the bytes it touches.

    A composite op (one defined in terms of others, like `aten::linear`) is decomposed here,
    as FlopCounterMode does, and its parts are counted instead: those are what runs. One
    mode doing all three keeps counting cheap: its cost is Python's, per op dispatched.
    """

    def __init__(self):
        super().__init__()
        self.ops: dict[str, int] = {}
        self.flops = 0
        self.bytes_read = 0
        self.bytes_written = 0
        self._known: dict = {}  # op -> (name, decomposes, is a view, FLOP formula or None)

    def _describe(self, func) -> tuple:
        name = func.name()
        decomposes = (func is not torch.ops.prim.device.default and
                      torch._C._dispatch_has_kernel_for_dispatch_key(
                          name, "CompositeImplicitAutograd"))
        # A view aliases an input without writing it: it moves no data.
        is_view = any(r.alias_info is not None and not r.alias_info.is_write
                      for r in func._schema.returns)
        found = self._known[func] = (name, decomposes, is_view,
                                     _FLOP_FORMULAS.get(func._overloadpacket))
        return found

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        known = self._known.get(func)
        name, decomposes, is_view, formula = known if known else self._describe(func)
        if decomposes:
            # Its C++ composite kernel, whose parts come back through this mode. (Not
            # `func.decompose`: that prefers a Python decomposition, several times slower.)
            with self:
                return func._op_dk(_COMPOSITE, *args, **kwargs)
        out = func(*args, **kwargs)
        ops = self.ops
        ops[name] = ops.get(name, 0) + 1
        if formula is not None:
            if func._overloadpacket in _RAW:
                self.flops += int(formula(*args, **kwargs, out_val=out))
            else:
                self.flops += int(formula(*_shapes(args), out_shape=_shapes(out),
                                          **{k: _shapes(v) for k, v in kwargs.items()}))
        if not is_view:
            self.bytes_read += _tensor_bytes(args)
            if kwargs:
                self.bytes_read += _tensor_bytes(kwargs.values())
            self.bytes_written += _tensor_bytes((out,))
        return out


def count_work(fn: Callable, *args, **kwargs) -> tuple[object, WorkCount]:
    """Run `fn(*args, **kwargs)` once, counting its work; returns (its result, the count)."""
    before = compile_counts()
    with _WorkCounter() as counter:
        result = fn(*args, **kwargs)
    after = compile_counts()
    compiled = breaks = None
    if after is not None:
        delta = after - (before or NOTHING_COMPILED)
        compiled, breaks = delta.graphs, delta.graph_breaks
    return result, WorkCount(ops=dict(counter.ops), flops=counter.flops,
                             bytes_read=counter.bytes_read, bytes_written=counter.bytes_written,
                             graphs_compiled=compiled, graph_breaks=breaks)
