"""The settings objects, each default defined exactly once.

`EngineConfig` says which model runs where; `SamplingParams` says how one request is
decoded. CLI flags, pytest options and server request fields all take their defaults from
these dataclasses (see `default_of`), so a default never drifts between front ends.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from llmbench.errors import UserError

DEFAULT_MODEL = "smollm2-135m"
ENGINES = ("loop", "hf")
# The names a user may pass; `device` resolves them. Kept here, free of torch, so that
# front ends that only parse flags (`llmbench compare --help`) never load torch.
DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("auto", "float32", "float16", "bfloat16")
# The KV cache a generation decodes on: transformers' growing DynamicCache, or its
# preallocated StaticCache (see `llmbench.engine.kv_cache`).
KV_CACHES = ("dynamic", "static")
# Attention implementations: the model's own choice (transformers picks its SDPA wrapper
# where the architecture supports it), or one of the two that run on every device: the
# SDPA wrapper (a fused kernel where the device has one) and transformers' eager
# matmul-softmax-matmul.
ATTENTIONS = ("auto", "sdpa", "eager")
# The linear layers' weights: the model's dtype as loaded, the same values prepacked for
# oneDNN on the CPU (see `llmbench.engine.packed`), or quantized weight-only through torchao
# (see `llmbench.engine.quantized`).
WEIGHTS = ("native", "packed", "int8", "int4")


@dataclass(frozen=True)
class EngineConfig:
    """Which model to load, and on what hardware and precision."""

    model: str = DEFAULT_MODEL
    device: str = "auto"
    dtype: str = "auto"
    threads: int | None = None
    kv_cache: str = KV_CACHES[0]
    compile: bool = False  # torch.compile of the decode step (needs the static cache)
    attn: str = ATTENTIONS[0]
    weights: str = WEIGHTS[0]

    def __post_init__(self) -> None:
        if not self.model:
            raise UserError("--model must not be empty: pass a registered name, a hub id or a path")
        if self.device not in DEVICES:
            raise UserError(f"unknown device {self.device!r}: choose one of {', '.join(DEVICES)}")
        if self.dtype not in DTYPES:
            raise UserError(f"unknown dtype {self.dtype!r}: choose one of {', '.join(DTYPES)}")
        if self.threads is not None and self.threads < 1:
            raise UserError(f"--threads must be at least 1, got {self.threads}")
        if self.kv_cache not in KV_CACHES:
            raise UserError(f"unknown KV cache {self.kv_cache!r}: choose one of "
                            f"{', '.join(KV_CACHES)}")
        if self.attn not in ATTENTIONS:
            raise UserError(f"unknown attention {self.attn!r}: choose one of "
                            f"{', '.join(ATTENTIONS)}")
        if self.weights not in WEIGHTS:
            raise UserError(f"unknown weights {self.weights!r}: choose one of "
                            f"{', '.join(WEIGHTS)}")
        if self.compile and self.kv_cache != "static":
            raise UserError("--compile needs --cache static: a dynamic cache changes shape at "
                            "every decode step, so every step would compile anew")
        if self.compile and self.weights == "packed":
            raise UserError("--weights packed runs eager: inductor cannot compile a graph that "
                            "takes oneDNN-packed weights; drop --compile or use --weights "
                            "native")

    @property
    def variant(self) -> str:
        """What sets this configuration's runs apart from the default engine's ('' for the
        default): runs of different variants are saved and compared apart."""
        parts = [f"{self.weights}-weights" if self.weights != WEIGHTS[0] else "",
                 f"{self.kv_cache}-cache" if self.kv_cache != KV_CACHES[0] else "",
                 "compiled" if self.compile else "",
                 f"{self.attn}-attn" if self.attn != ATTENTIONS[0] else ""]
        return "-".join(filter(None, parts))


@dataclass(frozen=True)
class SamplingParams:
    """How one request is decoded. temperature 0 means greedy; top_k 0 and top_p 1 mean off.

    `ignore_eos` generates exactly `max_new_tokens` tokens whatever the model says, which is
    what benchmarks need: every round then does the same amount of work.
    """

    max_new_tokens: int = 50
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise UserError(f"max_new_tokens must be at least 1, got {self.max_new_tokens}")
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise UserError("temperature must be a finite number >= 0 (0 = greedy), "
                            f"got {self.temperature}")
        if self.top_k < 0:
            raise UserError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not (0.0 < self.top_p <= 1.0):
            raise UserError(f"top_p must be in (0, 1] (1 = off), got {self.top_p}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0


def default_of(cls: type, field_name: str):
    """The declared default of a dataclass field, for front ends that must not repeat it."""
    for field in dataclasses.fields(cls):
        if field.name == field_name:
            assert field.default is not dataclasses.MISSING, field_name
            return field.default
    raise KeyError(field_name)
