"""The `llmbench` command: argparse subcommands, each a few lines over the library.

User errors (bad flags, unknown model or device, impossible requests) print one line to
stderr and exit 2; nothing here prints a traceback for them. A reader that closes stdout
early (`| head`) cuts the output short, never the exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings

from llmbench import __version__
from llmbench.cli import (
    ab,
    agreement,
    bisect,
    compare,
    dashboard,
    doctor,
    generate,
    history,
    load,
    profile,
    report,
    server,
    store,
)
from llmbench.errors import Exit, UserError
from llmbench.runs import DamagedRunSkipped


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (plus exit 2), not a usage dump."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        self.exit(Exit.USAGE, f"{self.prog}: error: {message} (see --help)\n")


class _Command(_Parser):
    """The `llmbench` parser: hands `ab`'s arguments after `--` to pytest, unparsed."""

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        ours, pytest_args = ab.split_pytest_args(args)
        namespace, extras = super().parse_known_args(ours, namespace)
        if pytest_args is not None:
            namespace.pytest_args = pytest_args
        return namespace, extras


# The docs page (docs/, built by `nox -s docs`) that explains each subcommand.
DOCS_PAGES = {
    "generate": "getting-started.md", "models": "getting-started.md",
    "agreement": "engines.md", "profile": "engines.md", "report": "reports.md",
    "compare": "verdicts.md", "ab": "ab.md", "history": "history.md", "dashboard": "dashboard.md",
    "serve": "server.md", "load": "server.md", "doctor": "stability.md", "bisect": "bisect.md",
    "store": "stores.md",
}


def _docs_epilog(page: str) -> str:
    return (f"Explained in docs/{page}; every flag: docs/reference/cli.md (`nox -s docs` "
            "builds the site into site/).")


def build_parser() -> argparse.ArgumentParser:
    parser = _Command(prog="llmbench", description="Did this change make LLM inference "
                                                   "slower, and is that real or noise?",
                      epilog=_docs_epilog("index.md"))
    parser.add_argument("--version", action="version", version=f"llmbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in (generate, agreement, profile, report, compare, ab, bisect, history,
                    dashboard, server, load, doctor, store):
        command.register(sub)
    for name, command_parser in sub.choices.items():
        epilog = _docs_epilog(DOCS_PAGES[name])  # KeyError: a new command needs its page
        # A command's own subcommands (`store push`) are explained on its page too.
        for nested in [command_parser, *_subparsers(command_parser)]:
            nested.epilog = f"{nested.epilog}\n\n{epilog}" if nested.epilog else epilog
    return parser


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    return [command for action in parser._actions
            if isinstance(action, argparse._SubParsersAction)
            for command in action.choices.values()]


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


@contextlib.contextmanager
def _damaged_runs_named(command: str):
    """Each saved run a command left out because it could not be read, named in one line
    on stderr (once), in place of Python's warning format."""
    def show(message, category, *_args, **_kwargs):
        if issubclass(category, DamagedRunSkipped):
            print(f"llmbench {command}: {message}", file=sys.stderr)
        else:
            shown(message, category, *_args, **_kwargs)

    shown = warnings.showwarning
    with warnings.catch_warnings():
        warnings.simplefilter("default", DamagedRunSkipped)
        warnings.showwarning = show
        yield


def main(argv: list[str] | None = None) -> int:
    with _closed_stdout_tolerated():
        args = build_parser().parse_args(argv)  # --help output may meet a closed pipe too
        try:
            with _damaged_runs_named(args.command):
                return args.func(args)
        except UserError as exc:
            print(f"llmbench {args.command}: error: {exc}", file=sys.stderr)
            return Exit.USAGE
        except KeyboardInterrupt:
            print(f"llmbench {args.command}: interrupted", file=sys.stderr)
            return Exit.INTERRUPTED
