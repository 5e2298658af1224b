"""`llmbench generate` and `llmbench models`: one generation with its timings, and the
registered model names. The model code loads only when the command runs."""

from __future__ import annotations

import argparse
import json
import sys

from llmbench.cli.args import (
    add_cache_argument,
    add_engine_arguments,
    add_sampling_arguments,
    engine_config,
    sampling_params,
)
from llmbench.engine.config import ENGINES
from llmbench.errors import Exit, UserError

DEFAULT_PROMPT = "Explain in two sentences what a KV cache does in a language model."


def cmd_generate(args: argparse.Namespace) -> int:
    from llmbench.engine.attention import attention_of
    from llmbench.engine.models import load_model
    from llmbench.engine.paths import run_generation

    params = sampling_params(args)  # validate the request before the slow model load
    config = engine_config(args)
    if args.no_cache and config.kv_cache != "dynamic":
        raise UserError(f"--no-cache contradicts --cache {config.kv_cache}: drop one of them")
    lm = load_model(config)
    result = run_generation(lm, args.prompt, params, engine=args.engine,
                            use_cache=not args.no_cache, chat=not args.no_chat)
    if args.json:
        record = {**result.to_dict(), "model": lm.fingerprint, "device": str(lm.device),
                  "kv_cache": None if args.no_cache else lm.kv_cache,
                  "compiled": lm.compiled_decoder is not None,
                  "attn": attention_of(lm.model), "weights": config.weights}
        print(json.dumps(record, indent=2))
    else:
        print(result.text)
        ms = result.decode_ms_per_token
        cache = "no cache" if args.no_cache else f"{lm.kv_cache} cache"
        if lm.compiled_decoder is not None:
            cache += ", compiled"
        if config.weights != "native":
            cache += f", {config.weights} weights"
        print(f"[{lm.name} on {lm.device}, {args.engine}, {cache}] {result.input_tokens} in, "
              f"{result.output_tokens} out ({result.finish_reason}), "
              f"TTFT {result.ttft_s * 1e3:.0f} ms, "
              f"decode {'-' if ms is None else f'{ms:.1f}'} ms/token, "
              f"{result.tokens_per_second:.1f} tokens/s", file=sys.stderr)
    return Exit.OK


def cmd_models(args: argparse.Namespace) -> int:
    from llmbench.engine.models import registered_names

    print("\n".join(registered_names()))
    return Exit.OK


def register(subparsers) -> None:
    """Add `generate` and `models` to the `llmbench` command."""
    gen = subparsers.add_parser("generate", help="generate once and print the text and timings")
    add_engine_arguments(gen)
    add_cache_argument(gen)
    add_sampling_arguments(gen)
    gen.add_argument("--engine", choices=ENGINES, default=ENGINES[0],
                     help="loop: our prefill/decode loop; hf: model.generate. "
                          "Default: %(default)r")
    gen.add_argument("--no-cache", action="store_true",
                     help="recompute the whole sequence every step (loop engine only)")
    gen.add_argument("--no-chat", action="store_true",
                     help="send the prompt as raw text, without the chat template")
    gen.add_argument("--prompt", default=DEFAULT_PROMPT, metavar="TEXT",
                     help="Default: %(default)r")
    gen.add_argument("--json", action="store_true", help="print the result record as JSON")
    gen.set_defaults(func=cmd_generate)

    models = subparsers.add_parser("models", help="list the registered model names")
    models.set_defaults(func=cmd_models)
