"""`llmbench agreement`: how far one engine configuration's greedy tokens agree with the
same model's in float32 with native weights, eager on a dynamic cache, on prompts from the
shipped passage. What a faster, lower-precision path costs in accuracy, beside what it
gains in speed."""

from __future__ import annotations

import argparse
import dataclasses
import json

from llmbench.cli.args import add_cache_argument, add_engine_arguments, engine_config, positive_int
from llmbench.engine import agreement
from llmbench.errors import Exit

REFERENCE = {"dtype": "float32", "weights": "native", "kv_cache": "dynamic", "compile": False,
             "attn": "auto"}


def cmd_agreement(args: argparse.Namespace) -> int:
    from llmbench.engine.models import load_model

    candidate_config = engine_config(args)
    reference_config = dataclasses.replace(candidate_config, **REFERENCE)
    candidate = load_model(candidate_config)  # first: its user errors come before any work
    prompts = agreement.agreement_prompts(candidate.tokenizer, args.prompts, args.prompt_tokens)
    rows = agreement.greedy_rows(candidate, prompts, args.new_tokens, candidate.kv_cache)
    del candidate
    reference = load_model(reference_config)
    reference_rows = agreement.greedy_rows(reference, prompts, args.new_tokens, "dynamic")
    result = agreement.token_agreement(reference_rows, rows)
    configuration = {k: getattr(candidate_config, k)
                     for k in ("model", "dtype", "weights", "kv_cache", "compile", "attn")}
    if args.json:
        print(json.dumps({"configuration": configuration, "reference": REFERENCE,
                          "prompt_tokens": args.prompt_tokens, **result.to_json()}, indent=2))
        return Exit.OK
    named = ", ".join(f"{k} {v}" for k, v in configuration.items() if k != "model")
    print(f"{candidate_config.model}: {named}\n  against float32, native weights, eager, "
          f"dynamic cache; {len(prompts)} prompts of {args.prompt_tokens} tokens")
    for i, prefix in enumerate(result.prefixes):
        same = "identical" if prefix == result.length else f"first difference at token {prefix}"
        print(f"  prompt {i:2d}: {same}")
    print(f"  {result}")
    return Exit.OK


def register(subparsers) -> None:
    """Add `agreement` to the `llmbench` command."""
    cmd = subparsers.add_parser(
        "agreement", help="greedy-token agreement of a configuration with float32",
        description="Generate greedily with one engine configuration and with the same "
                    "model in float32 (native weights, eager, dynamic cache), and say per "
                    "prompt how many tokens agree before the first difference.")
    add_engine_arguments(cmd)
    add_cache_argument(cmd)
    cmd.add_argument("--prompts", type=positive_int, default=agreement.AGREEMENT_PROMPTS,
                     metavar="N", help="prompts from the shipped passage. Default: %(default)r")
    cmd.add_argument("--prompt-tokens", type=positive_int,
                     default=agreement.AGREEMENT_PROMPT_TOKENS, metavar="N",
                     help="tokens per prompt. Default: %(default)r")
    cmd.add_argument("--new-tokens", type=positive_int, default=agreement.AGREEMENT_NEW_TOKENS,
                     metavar="N", help="greedy tokens compared per prompt. Default: %(default)r")
    cmd.add_argument("--json", action="store_true", help="print the result as JSON")
    cmd.set_defaults(func=cmd_agreement)
