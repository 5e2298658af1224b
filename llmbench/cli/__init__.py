"""The `llmbench` command: argparse subcommands, each a few lines over the library.

User errors (bad flags, unknown model or device, impossible requests) print one line to
stderr and exit 2; nothing here prints a traceback for them. A reader that closes stdout
early (`| head`) cuts the output short, never the exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

from llmbench import __version__
from llmbench.cli import gate as cli_gate
from llmbench.cli import report as cli_report
from llmbench.cli import server as cli_server
from llmbench.engine.config import ENGINES, EngineConfig, SamplingParams, default_of
from llmbench.engine.device import DEVICES, DTYPES
from llmbench.errors import EXIT_OK, EXIT_USAGE, UserError

DEFAULT_PROMPT = "Explain in two sentences what a KV cache does in a language model."


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (plus exit 2), not a usage dump."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text) if text.lstrip("-").isdigit() else None
    if value is None or value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def _float_in(text: str, expected: str, is_valid, bound: str) -> float:
    """Parse a float flag: `expected` names it when unparsable, `bound` when out of range."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if not is_valid(value):
        raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
    return value


def non_negative_float(text: str) -> float:
    return _float_in(text, "a number", lambda v: v >= 0, ">= 0")


def positive_seconds(text: str) -> float:
    return _float_in(text, "seconds", lambda v: v > 0, "> 0")


def probability(text: str) -> float:
    return _float_in(text, "a number in (0, 1]", lambda v: 0.0 < v <= 1.0, "in (0, 1]")


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """--model --device --dtype --threads, defaults from EngineConfig."""
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
                        threads=args.threads)


def sampling_params(args: argparse.Namespace) -> SamplingParams:
    return SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                          top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                          ignore_eos=args.fixed_length)


def cmd_generate(args: argparse.Namespace) -> int:
    from llmbench.engine.models import load_model
    from llmbench.engine.paths import run_generation

    params = sampling_params(args)  # validate the request before the slow model load
    lm = load_model(engine_config(args))
    result = run_generation(lm, args.prompt, params, engine=args.engine,
                            use_cache=not args.no_cache, chat=not args.no_chat)
    if args.json:
        record = {**result.to_dict(), "model": lm.fingerprint, "device": str(lm.device)}
        print(json.dumps(record, indent=2))
    else:
        print(result.text)
        ms = result.decode_ms_per_token
        print(f"[{lm.name} on {lm.device}, {args.engine}] {result.input_tokens} in, "
              f"{result.output_tokens} out ({result.finish_reason}), "
              f"TTFT {result.ttft_s * 1e3:.0f} ms, "
              f"decode {'-' if ms is None else f'{ms:.1f}'} ms/token, "
              f"{result.tokens_per_second:.1f} tokens/s", file=sys.stderr)
    return EXIT_OK


def cmd_models(args: argparse.Namespace) -> int:
    from llmbench.engine.models import registered_names

    print("\n".join(registered_names()))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="llmbench", description="Did this change make LLM inference slower, "
                                                  "and is that real or noise?")
    parser.add_argument("--version", action="version", version=f"llmbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    gen = sub.add_parser("generate", help="generate once and print the text and timings")
    add_engine_arguments(gen)
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

    models = sub.add_parser("models", help="list the registered model names")
    models.set_defaults(func=cmd_models)
    cli_report.register(sub)
    cli_gate.register(sub)
    cli_server.register(sub)
    return parser


class _StdoutReaderMayLeave:
    """sys.stdout for one command, whose reader may leave early (`llmbench compare A B |
    head`): from the first write into a closed pipe on, output goes to /dev/null instead.

    The command then finishes and exits with its own code (0, 1 for a regression, 2), which
    scripts running under `set -o pipefail` rely on; letting BrokenPipeError escape would
    print a traceback and exit 1, which here means "a regression was found".
    """

    def __init__(self, stream):
        self.stream = stream

    def _discard_the_rest(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self.stream.fileno())  # what is still buffered drains there too
        os.close(devnull)

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            self._discard_the_rest()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._discard_the_rest()

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


@contextlib.contextmanager
def _closed_stdout_tolerated():
    guard = _StdoutReaderMayLeave(sys.stdout)
    sys.stdout = guard
    try:
        yield
    finally:
        guard.flush()  # now, not at interpreter exit, where a closed pipe cannot be caught
        sys.stdout = guard.stream


def main(argv: list[str] | None = None) -> int:
    with _closed_stdout_tolerated():
        args = build_parser().parse_args(argv)  # --help output may meet a closed pipe too
        try:
            return args.func(args)
        except UserError as exc:
            print(f"llmbench {args.command}: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except KeyboardInterrupt:
            print(f"llmbench {args.command}: interrupted", file=sys.stderr)
            return 130
