"""`llmbench compare` and `llmbench ab`: the regression gate from the command line.

Exit codes (llmbench.errors): 0 no regression, 1 at least one regression (or, with
--fail-on-inconclusive, an inconclusive benchmark), 2 the runs cannot be compared.
"""

from __future__ import annotations

import argparse
import sys

from llmbench import gate


def _fraction(text: str) -> float:
    try:
        return gate.parse_fraction(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _threshold_for(text: str) -> tuple[str, float]:
    try:
        return gate.parse_threshold_for(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _alpha(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 0.5), got {text!r}") from None
    if not 0 < value < 0.5:
        raise argparse.ArgumentTypeError(f"must be in (0, 0.5), got {text}")
    return value


def add_gate_arguments(parser: argparse.ArgumentParser) -> None:
    """The decision-rule flags shared by compare and ab; defaults from GateOptions."""
    parser.add_argument("--threshold", type=_fraction, default=None, metavar="PCT",
                        help="practical threshold for the whole run, e.g. 10%% or 0.1. "
                             "Default: the device's (10%% cpu, 5%% cuda/mps)")
    parser.add_argument("--threshold-for", type=_threshold_for, action="append", default=[],
                        metavar="NAME=PCT", dest="threshold_for",
                        help="threshold for one group or benchmark, e.g. decode=20%%; "
                             "repeatable; a benchmark's beats its group's beats --threshold")
    parser.add_argument("--alpha", type=_alpha, default=gate.DEFAULT_ALPHA, metavar="A",
                        help="family-wise false-alarm rate (Holm over the run). "
                             "Default: %(default)r")
    parser.add_argument("--normalize", action="store_true",
                        help="divide the machine-speed ratio (control workload) out of the "
                             "candidate's samples")
    parser.add_argument("--allow-mismatch", action="store_true",
                        help="compare runs of different model, device, dtype or threads")
    parser.add_argument("--fail-on-inconclusive", action="store_true",
                        help="exit 1 when a benchmark is inconclusive, not only on a regression")
    parser.add_argument("--format", choices=gate.FORMATS, default=gate.FORMATS[0],
                        help="Default: %(default)r")


def gate_options(args: argparse.Namespace) -> gate.GateOptions:
    return gate.GateOptions(threshold=args.threshold, threshold_for=dict(args.threshold_for),
                            alpha=args.alpha, normalize=args.normalize,
                            allow_mismatch=args.allow_mismatch,
                            fail_on_inconclusive=args.fail_on_inconclusive)


def cmd_compare(args: argparse.Namespace) -> int:
    from llmbench.runs import load_run

    baseline, candidate = load_run(args.baseline), load_run(args.candidate)
    result = gate.compare_runs(baseline, candidate, gate_options(args))
    print(gate.render(result, args.format))
    return result.exit_code


def cmd_ab(args: argparse.Namespace) -> int:
    from llmbench.gate import ab

    result = ab.run_ab(args.rev, blocks=args.blocks, rounds=args.rounds,
                       pytest_args=args.pytest_args, options=gate_options(args),
                       keep=args.keep, log=sys.stderr)
    print(gate.render(result, args.format))
    return result.exit_code


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def _with_passthrough(parser_class: type) -> type:
    class PassthroughParser(parser_class):
        """Everything after the first `--` goes to `pytest_args`, unparsed."""

        def parse_known_args(self, args=None, namespace=None):
            args = list(sys.argv[1:] if args is None else args)
            cut = args.index("--") if "--" in args else len(args)
            namespace, extras = super().parse_known_args(args[:cut], namespace)
            namespace.pytest_args = args[cut + 1:]
            return namespace, extras

    return PassthroughParser


def register(subparsers) -> None:
    """Add `compare` and `ab` to the `llmbench` command."""
    from llmbench.gate import ab

    compare = subparsers.add_parser(
        "compare", help="regression verdicts between two saved runs",
        description="Compare CANDIDATE against BASELINE benchmark by benchmark: ratio of "
                    "medians with a bootstrap CI, a rank test with Holm's correction, and a "
                    "verdict. Exit 0: no regression; 1: a regression; 2: cannot compare.")
    compare.add_argument("baseline", metavar="BASELINE",
                         help="a run's JSON, or an environment folder (its newest run)")
    compare.add_argument("candidate", metavar="CANDIDATE",
                         help="a run's JSON, or an environment folder (its newest run)")
    add_gate_arguments(compare)
    compare.set_defaults(func=cmd_compare)

    # `ab`'s parser splits its arguments at the first `--` itself: argparse cannot give a
    # trailing free-form list after optional flags to a positional (REMAINDER swallows the
    # flags, nargs="*" rejects what follows `--`).
    base_class = subparsers._parser_class
    subparsers._parser_class = _with_passthrough(base_class)
    try:
        abp = subparsers.add_parser(
            "ab", help="A/B a git revision against the working tree, interleaved on this machine",
            usage="llmbench ab REV [--blocks N] [--rounds N] [--keep DIR] [gate options] "
                  "[-- PYTEST_ARGS ...]",
            description="Check REV out into a temporary git worktree and run its benchmark suite "
                        "(the baseline) and the working tree's (the candidate) alternately in "
                        "blocks, then apply the gate to the blocks' medians. Machine drift "
                        "hits both sides alike: the recommended check for a pull request on a "
                        "noisy machine. More blocks, not more rounds, narrow the verdict. Pass "
                        "pytest arguments after --, e.g. "
                        "`llmbench ab main -- --model tiny -k decode`.")
    finally:
        subparsers._parser_class = base_class
    abp.add_argument("rev", metavar="REV", help="the baseline revision, e.g. main or HEAD~1")
    abp.add_argument("--blocks", type=_positive_int, default=ab.DEFAULT_BLOCKS, metavar="N",
                     help="pytest runs per side, alternating. Default: %(default)r")
    abp.add_argument("--rounds", type=_positive_int, default=ab.DEFAULT_ROUNDS, metavar="N",
                     help="timed rounds per benchmark in each block. Default: %(default)r")
    abp.add_argument("--keep", default=None, metavar="DIR",
                     help="keep every block's run under DIR. Default: a temporary folder, "
                          "removed afterwards")
    add_gate_arguments(abp)
    abp.set_defaults(func=cmd_ab, pytest_args=[])
