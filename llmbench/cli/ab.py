"""`llmbench ab REV [-- PYTEST_ARGS]`: A/B a git revision against the working tree,
interleaved on this machine. Exit codes as for `llmbench compare`.

Everything after the first `--` goes to pytest unparsed (`split_pytest_args`, called by
the top-level parser before argparse sees the arguments): argparse cannot give a trailing
free-form list after optional flags to a positional (REMAINDER swallows the flags,
nargs="*" rejects what follows `--`).
"""

from __future__ import annotations

import argparse
import sys

from llmbench.cli.args import add_gate_arguments, positive_int

COMMAND = "ab"


def split_pytest_args(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """(the arguments for argparse, those for pytest), or (argv, None) when the command is
    not `ab` or has no `--`: other commands keep argparse's own meaning of `--`."""
    words = [a for a in argv if not a.startswith("-")]
    if "--" not in argv or not words or words[0] != COMMAND:
        return argv, None
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]


def cmd_ab(args: argparse.Namespace) -> int:
    from llmbench import gate
    from llmbench.gate import ab
    from llmbench.gate.options import gate_options

    result = ab.run_ab(args.rev, blocks=args.blocks, rounds=args.rounds,
                       pytest_args=args.pytest_args, options=gate_options(vars(args)),
                       keep=args.keep, log=sys.stderr)
    print(gate.render(result, args.format))
    return result.exit_code


def register(subparsers) -> None:
    """Add `ab` to the `llmbench` command."""
    from llmbench.gate.ab import DEFAULT_BLOCKS, DEFAULT_ROUNDS

    parser = subparsers.add_parser(
        COMMAND, help="A/B a git revision against the working tree, interleaved on this machine",
        usage="llmbench ab REV [--blocks N] [--rounds N] [--keep DIR] [gate options] "
              "[-- PYTEST_ARGS ...]",
        description="Check REV out into a temporary git worktree and run its benchmark suite "
                    "(the baseline) and the working tree's (the candidate) alternately in "
                    "blocks, then apply the gate to the blocks' medians. Machine drift "
                    "hits both sides alike: the recommended check for a pull request on a "
                    "noisy machine. More blocks, not more rounds, narrow the verdict. Pass "
                    "pytest arguments after --, e.g. "
                    "`llmbench ab main -- --model tiny -k decode`.")
    parser.add_argument("rev", metavar="REV", help="the baseline revision, e.g. main or HEAD~1")
    parser.add_argument("--blocks", type=positive_int, default=DEFAULT_BLOCKS, metavar="N",
                        help="pytest runs per side, alternating. Default: %(default)r")
    parser.add_argument("--rounds", type=positive_int, default=DEFAULT_ROUNDS, metavar="N",
                        help="timed rounds per benchmark in each block. Default: %(default)r")
    parser.add_argument("--keep", default=None, metavar="DIR",
                        help="keep every block's run under DIR. Default: a temporary folder, "
                             "removed afterwards")
    add_gate_arguments(parser)
    parser.set_defaults(func=cmd_ab, pytest_args=[])
