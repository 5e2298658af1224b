"""`llmbench profile`: the ops a decode step spends its time in, for one engine
configuration: the first thing to look at when a configuration is slower than it should be."""

from __future__ import annotations

import argparse
import json

from llmbench.cli.args import add_cache_argument, add_engine_arguments, engine_config, positive_int
from llmbench.errors import Exit, UserError

DEFAULT_TOP = 12


def cmd_profile(args: argparse.Namespace) -> int:
    from llmbench.engine.models import load_model
    from llmbench.engine.op_profile import decode_profile
    from llmbench.engine.prompts import exact_length_ids

    if args.new_tokens < 2:
        raise UserError("--new-tokens must be at least 2: one token is prefill only")
    config = engine_config(args)
    lm = load_model(config)
    prompt = exact_length_ids(lm.tokenizer, args.prompt_tokens)
    result = decode_profile(lm, prompt, args.new_tokens, lm.kv_cache)
    top = result.ops[:args.top]
    total = result.profiled_ms_per_step
    if args.json:
        print(json.dumps({"configuration": {k: getattr(config, k) for k in (
            "model", "dtype", "weights", "kv_cache", "compile", "attn")},
            "device": str(lm.device), "clock": result.clock,
            "decode_ms_per_token": result.decode_ms_per_token,
            "profiled_ms_per_step": total,
            "ops": [{"name": op.name, "ms_per_step": op.ms_per_step,
                     "calls_per_step": op.calls_per_step} for op in top]}, indent=2))
        return Exit.OK
    print(f"{lm.name} on {lm.device} ({config.variant or 'default engine'}, "
          f"{str(lm.dtype).removeprefix('torch.')}): decode {result.decode_ms_per_token:.1f} "
          f"ms/token unprofiled; {total:.1f} ms per step inside ops ({result.clock} time)")
    print(f"{'op':48s} {'ms/step':>8s} {'of ops':>6s} {'calls/step':>10s}")
    for op in top:
        print(f"{op.name[:48]:48s} {op.ms_per_step:8.2f} {op.ms_per_step / total:6.1%} "
              f"{op.calls_per_step:10.1f}")
    rest = total - sum(op.ms_per_step for op in top)
    print(f"{'(the other ' + str(len(result.ops) - len(top)) + ' ops)':48s} {rest:8.2f} "
          f"{rest / total:6.1%}")
    outside = result.decode_ms_per_token - total
    if result.clock == "cpu" and outside > 0:
        print(f"outside any op (Python, dispatch, allocator): at least {outside:.2f} ms per "
              f"step, {outside / result.decode_ms_per_token:.0%} of the unprofiled step")
    return Exit.OK


def register(subparsers) -> None:
    """Add `profile` to the `llmbench` command."""
    cmd = subparsers.add_parser(
        "profile", help="the top ops of one decode step",
        description="Profile greedy decoding with torch.profiler and print each op's self "
                    "time per decode step (prefill subtracted), the costliest first.")
    add_engine_arguments(cmd)
    add_cache_argument(cmd)
    cmd.add_argument("--prompt-tokens", type=positive_int, default=64, metavar="N",
                     help="prompt length, from the shipped passage. Default: %(default)r")
    cmd.add_argument("--new-tokens", type=positive_int, default=17, metavar="N",
                     help="tokens generated (N-1 decode steps). Default: %(default)r")
    cmd.add_argument("--top", type=positive_int, default=DEFAULT_TOP, metavar="N",
                     help="ops shown. Default: %(default)r")
    cmd.add_argument("--json", action="store_true", help="print the result as JSON")
    cmd.set_defaults(func=cmd_profile)
