"""`llmbench serve`: the inference server (its load generator is `llmbench load`).

`serve` binds 127.0.0.1 unless --host says otherwise.
"""

from __future__ import annotations

import argparse
import sys

from llmbench.cli.args import (
    add_cache_argument,
    add_engine_arguments,
    engine_config,
    positive_int,
)
from llmbench.engine.config import default_of
from llmbench.errors import Exit, UserError
from llmbench.serve.settings import DEFAULT_MAX_CONTEXT, ServerSettings


def register(subparsers) -> None:
    """Add `serve` to the `llmbench` subcommands."""
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
