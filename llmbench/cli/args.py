"""Flags that several subcommands share: engine and sampling settings (defaults from the
config dataclasses), the gate's decision flags (described in `llmbench.gate.options`), and
the value validators the subcommands use. Nothing here loads torch.
"""

from __future__ import annotations

import argparse

from llmbench import argtypes
from llmbench.engine.config import (
    ATTENTIONS,
    DEVICES,
    DTYPES,
    KV_CACHES,
    WEIGHTS,
    EngineConfig,
    SamplingParams,
    default_of,
)

positive_int = argtypes.whole_number(1)
non_negative_int = argtypes.whole_number(0)
non_negative_float = argtypes.number("a number", lambda v: v >= 0, ">= 0")
positive_seconds = argtypes.number("seconds", lambda v: v > 0, "> 0")
probability = argtypes.number("a number in (0, 1]", lambda v: 0.0 < v <= 1.0, "in (0, 1]")


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """--model --device --dtype --threads --attn, defaults from EngineConfig."""
    d = lambda name: default_of(EngineConfig, name)  # noqa: E731
    parser.add_argument("--model", default=d("model"), metavar="NAME",
                        help="registered name (see `llmbench models`), hub id or local "
                             "directory. Default: %(default)r")
    parser.add_argument("--device", default=d("device"), choices=DEVICES,
                        help="Default: %(default)r (prefers cuda, then mps, then cpu)")
    parser.add_argument("--dtype", default=d("dtype"), choices=DTYPES,
                        help="Default: %(default)r (float32 on cpu, half precision on GPUs)")
    parser.add_argument("--threads", type=positive_int, default=d("threads"), metavar="N",
                        help="torch CPU threads. Default: torch's choice")
    parser.add_argument("--attn", choices=ATTENTIONS, default=d("attn"),
                        help="attention: the model's own choice (auto), transformers' SDPA "
                             "wrapper (fused kernels where the device has them) or its eager "
                             "matmul-softmax-matmul. Default: %(default)r")
    parser.add_argument("--weights", choices=WEIGHTS, default=d("weights"),
                        help="the linear layers' weights: the model's dtype (native), the "
                             "same values reordered once into oneDNN's blocked layout (packed: "
                             "CPU, eager), or int8/int4 weight-only through torchao "
                             "(activations stay in --dtype). Which is fastest depends on the "
                             "CPU: the suite's engines group measures them side by side on "
                             "yours. Default: %(default)r")


def add_cache_argument(parser: argparse.ArgumentParser, *, static: str =
                       "preallocated for the prompt plus --max-new-tokens",
                       compiled: str = "the first generation of each shape includes "
                                       "compiling") -> None:
    """--cache and --compile; `static` and `compiled` say what they mean to this command."""
    parser.add_argument("--cache", dest="kv_cache", choices=KV_CACHES,
                        default=default_of(EngineConfig, "kv_cache"),
                        help=f"the KV cache: dynamic grows each step; static is {static}. "
                             "Default: %(default)r")
    parser.add_argument("--compile", action="store_true",
                        help=f"torch.compile the decode steps (needs --cache static); "
                             f"{compiled}")


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    """Sampling flags, defaults from SamplingParams."""
    d = lambda name: default_of(SamplingParams, name)  # noqa: E731
    parser.add_argument("--max-new-tokens", type=positive_int, default=d("max_new_tokens"),
                        metavar="N", help="Default: %(default)r")
    parser.add_argument("--fixed-length", action="store_true",
                        help="generate exactly --max-new-tokens tokens, ignoring EOS")
    parser.add_argument("--temperature", type=non_negative_float, default=d("temperature"),
                        metavar="T", help="0 is greedy. Default: %(default)r")
    parser.add_argument("--top-k", type=non_negative_int, default=d("top_k"), metavar="K",
                        help="0 is off. Default: %(default)r")
    parser.add_argument("--top-p", type=probability, default=d("top_p"), metavar="P",
                        help="1 is off. Default: %(default)r")
    parser.add_argument("--seed", type=int, default=d("seed"), metavar="N",
                        help="seed for sampling. Default: random")


def engine_config(args: argparse.Namespace) -> EngineConfig:
    return EngineConfig(model=args.model, device=args.device, dtype=args.dtype,
                        threads=args.threads,
                        kv_cache=getattr(args, "kv_cache", default_of(EngineConfig, "kv_cache")),
                        compile=getattr(args, "compile", False), attn=args.attn,
                        weights=args.weights)


def sampling_params(args: argparse.Namespace) -> SamplingParams:
    return SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                          top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                          ignore_eos=args.fixed_length)


def add_gate_arguments(parser: argparse.ArgumentParser) -> None:
    """The decision flags and --format, for the subcommands that print a verdict table."""
    from llmbench.gate import options
    from llmbench.gate.render import FORMATS

    options.register(parser.add_argument)
    parser.add_argument("--format", choices=FORMATS, default=FORMATS[0],
                        help="Default: %(default)r")


def add_store_argument(parser: argparse.ArgumentParser) -> None:
    """--store PATH|URL, as every command that reads or writes runs spells it (and the
    suite's pytest option: `llmbench.runs.location.STORE_HELP`)."""
    from llmbench.runs.location import STORE_HELP

    parser.add_argument("--store", default=None, metavar="PATH|URL", help=STORE_HELP)
