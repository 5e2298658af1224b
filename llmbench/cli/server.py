"""`llmbench serve` and `llmbench load`: the inference server and its load generator.

`serve` binds 127.0.0.1 unless --host says otherwise. `load` sweeps concurrency levels
against a server, prints one summary line per level to stderr, and writes the full JSON
(one record per level, every request's sample) to stdout or to --output, which must not
exist yet; it exits 1 when any request failed (see `cmd_load`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from llmbench.cli.args import (
    add_cache_argument,
    add_engine_arguments,
    add_sampling_arguments,
    engine_config,
    positive_int,
    positive_seconds,
    sampling_params,
)
from llmbench.engine.config import EngineConfig, default_of
from llmbench.errors import Exit, UserError
from llmbench.load.client import run_load
from llmbench.load.config import APIS, CONNECTION_ERROR, LoadConfig
from llmbench.serve.settings import DEFAULT_MAX_CONTEXT, ServerSettings


def _concurrency_list(text: str) -> list[int]:
    levels = [positive_int(part.strip()) for part in text.split(",") if part.strip()]
    if not levels:
        raise argparse.ArgumentTypeError(f"expected levels like 1,4,16, got {text!r}")
    return levels


def register(subparsers) -> None:
    """Add `serve` and `load` to the `llmbench` subcommands."""
    s = lambda name: default_of(ServerSettings, name)  # noqa: E731
    serve = subparsers.add_parser("serve", help="serve a model over HTTP (native and "
                                                "OpenAI-compatible routes)")
    add_engine_arguments(serve)
    add_cache_argument(serve, static="a slot per running sequence of --max-context "
                                     "positions, preallocated at start",
                       compiled="compiled for every batch size a step runs at (1, 2, 4, "
                                "... up to --max-batch-size) before the server takes "
                                "requests")
    serve.add_argument("--max-context", type=positive_int, default=None, metavar="N",
                       help="with --cache static: the longest request (prompt + "
                            "max_new_tokens) a slot holds; attention spans all N positions "
                            "at every step, so keep it near your longest requests. "
                            f"Default: {DEFAULT_MAX_CONTEXT}")
    serve.add_argument("--host", default=s("host"), metavar="ADDR",
                       help="address to bind; anything but loopback exposes the server. "
                            "Default: %(default)r")
    serve.add_argument("--port", type=int, default=s("port"), metavar="N",
                       help="Default: %(default)r")
    serve.add_argument("--max-batch-size", type=positive_int, default=s("max_batch_size"),
                       metavar="N", help="sequences decoded together. Default: %(default)r")
    serve.add_argument("--max-new-tokens-cap", type=positive_int,
                       default=s("max_new_tokens_cap"), metavar="N",
                       help="largest max_new_tokens a request may ask for. "
                            "Default: %(default)r")
    serve.set_defaults(func=cmd_serve)

    c = lambda name: default_of(LoadConfig, name)  # noqa: E731
    load = subparsers.add_parser(
        "load", help="send streamed requests at several concurrency levels and report TTFT, "
                     "ITL, TPOT, latency and throughput",
        description="Throughputs and percentiles count served requests only (goodput): an "
                    "error, an empty answer, or with --fixed-length a short one, is a "
                    "failure, counted per reason. Exit status: 0 when every request was "
                    "served, 1 when any failed (the JSON is written either way), 2 on a "
                    "usage error, or when no request reached a server that accepted it.")
    load.add_argument("--url", default=LoadConfig().url, metavar="URL",
                      help="the server's base URL. Default: %(default)r")
    load.add_argument("--api", choices=APIS, default=c("api"), help="Default: %(default)r")
    load.add_argument("--concurrency", type=_concurrency_list, default=[c("concurrency")],
                      metavar="N[,N...]", help="levels to sweep, e.g. 1,4,16. Default: 1")
    load.add_argument("--requests", type=positive_int, default=c("num_requests"), metavar="N",
                      help="requests per level. Default: %(default)r")
    load.add_argument("--model", default=default_of(EngineConfig, "model"), metavar="NAME",
                      help="whose tokenizer counts the tokens (also sent as the OpenAI "
                           "`model` field). Default: %(default)r")
    add_sampling_arguments(load)
    load.add_argument("--no-chat", action="store_true",
                      help="raw prompts: no chat template (native), /v1/completions (openai)")
    load.add_argument("--timeout", type=positive_seconds, default=c("timeout_s"), metavar="S",
                      help="per-request timeout in seconds. Default: %(default)r")
    load.add_argument("--duration", type=positive_seconds, default=c("duration_s"), metavar="S",
                      help="cap on each level's wall time; requests still running are cut "
                           "off and counted as errors. Default: no cap")
    load.add_argument("--output", type=Path, default=None, metavar="FILE",
                      help="write the JSON here (refused if FILE exists). Default: stdout")
    load.set_defaults(func=cmd_load)


def cmd_serve(args: argparse.Namespace) -> int:
    from llmbench.engine.models import load_model
    from llmbench.serve.app import create_app, listening_socket, uvicorn_server
    from llmbench.serve.slot_batch import buckets

    config = engine_config(args)
    if args.max_context is not None and config.kv_cache != "static":
        raise UserError("--max-context sizes the slots of a static cache: add --cache static, "
                        "or drop --max-context (a dynamic cache grows as it needs)")
    settings = ServerSettings(host=args.host, port=args.port,
                              max_batch_size=args.max_batch_size,
                              max_new_tokens_cap=args.max_new_tokens_cap,
                              max_context=args.max_context or DEFAULT_MAX_CONTEXT)
    # Take the port first: a busy port is one line now, not after loading the model.
    sock = listening_socket(settings.host, settings.port)
    with sock:
        lm = load_model(config)
        app = create_app(lm, settings)
        if config.compile:
            print(f"llmbench serve: compiling the decode step for batch sizes "
                  f"{', '.join(map(str, buckets(settings.max_batch_size)))} before serving",
                  file=sys.stderr)
        app.state.scheduler.start()  # warm up, and refuse an unsupported model, before serving
        print(f"llmbench serve: {lm.name} on {lm.device} at http://{settings.host}:"
              f"{sock.getsockname()[1]} (API docs at /docs)", file=sys.stderr)
        uvicorn_server(app).run(sockets=[sock])
    return Exit.OK


def cmd_load(args: argparse.Namespace) -> int:
    """Exit 0 when every request of every level was served; 1 when any failed (an error,
    an empty answer, a short fixed-length answer, a cut-off): like the server benchmarks,
    which fail on any of these, the figures then describe only the requests that survived,
    so a script must not take them as the run it asked for. The JSON is written either
    way, with the failures counted per reason. 2 is a usage error: bad flags, or a first
    level where no request reached a server that accepted it (nothing listening at --url,
    the wrong --api, or a request the server refuses with 4xx)."""
    from tqdm import tqdm

    from llmbench.engine.models import load_tokenizer
    from llmbench.engine.prompts import questions
    from llmbench.load.result import summary_line

    if args.output is not None and args.output.exists():
        raise UserError(f"{args.output} exists: remove it or pass another --output")
    configs = [LoadConfig(url=args.url, api=args.api, concurrency=level,
                          num_requests=args.requests, chat=not args.no_chat,
                          model=args.model, timeout_s=args.timeout, duration_s=args.duration)
               for level in args.concurrency]
    params = sampling_params(args)
    tokenizer = load_tokenizer(args.model)
    levels = []
    for config in configs:
        with tqdm(total=config.num_requests, desc=f"concurrency {config.concurrency}",
                  unit="req", file=sys.stderr, disable=None) as bar:
            result = run_load(config, params, tokenizer, questions(), progress=bar.update)
        if not levels and _is_refused(result):
            raise UserError(f"no request was accepted at concurrency {config.concurrency} "
                            f"({result.samples[0].error}): is a server running at "
                            f"{config.url} with the {config.api} API, and do the flags "
                            "suit it?")
        print(summary_line(result.summary()), file=sys.stderr)
        levels.append(result.to_dict())
    text = json.dumps({"url": args.url, "api": args.api, "model": args.model,
                       "levels": levels}, indent=2)
    if args.output is None:
        print(text)
    else:
        with open(args.output, "x", encoding="utf-8") as fh:  # "x": never overwrite
            fh.write(text + "\n")
    failed = [lv["summary"] for lv in levels if lv["summary"]["num_errors"]]
    if not failed:
        return Exit.OK
    print(f"llmbench load: failed: {sum(s['num_errors'] for s in failed)} of "
          f"{sum(lv['summary']['num_requests'] for lv in levels)} requests, at concurrency "
          f"{', '.join(str(s['concurrency']) for s in failed)}", file=sys.stderr)
    return Exit.REGRESSION


def _is_refused(result) -> bool:
    """True when every request failed before the server would serve it: no connection, or
    a 4xx other than 408 and 429 (those say "not now", not "not like this")."""
    def refused(reason: str | None) -> bool:
        return reason == CONNECTION_ERROR or (
            reason is not None and reason.startswith("HTTP 4")
            and reason not in ("HTTP 408", "HTTP 429"))

    return bool(result.samples) and not result.num_cut_off and all(
        refused(s.reason) for s in result.samples)
