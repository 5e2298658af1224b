"""`llmbench ab REV [-- PYTEST_ARGS]`: A/B a git revision against the working tree on this
machine, paired round by round. Exit codes as
for `llmbench compare`; Ctrl-C (or SIGTERM) ends both sides, prints what was decided so far
and exits 130.

Everything after the first `--` goes to pytest unparsed (`split_pytest_args`, called by
the top-level parser before argparse sees the arguments): argparse cannot give a trailing
free-form list after optional flags to a positional (REMAINDER swallows the flags,
nargs="*" rejects what follows `--`).
"""

from __future__ import annotations

import argparse
import sys

from llmbench.argtypes import duration, parsed_by, whole_number
from llmbench.cli.args import add_gate_arguments

COMMAND = "ab"
# The commands whose arguments after `--` go to pytest.
PYTEST_COMMANDS = (COMMAND, "bisect")


def split_pytest_args(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """(the arguments for argparse, those for pytest), or (argv, None) when the command is
    not `ab` or `bisect`, or has no `--`: other commands keep argparse's own meaning of
    `--`."""
    words = [a for a in argv if not a.startswith("-")]
    if "--" not in argv or not words or words[0] not in PYTEST_COMMANDS:
        return argv, None
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]


def _print_decided(coordinator) -> None:
    """After Ctrl-C: each benchmark paired so far, with its verdict from the pairs it got."""
    from llmbench.gate import sequential

    base, cand = coordinator.workers["baseline"], coordinator.workers["candidate"]
    pairs = {name: (base.timed.get(name, []), cand.timed.get(name, []))
             for name in coordinator.records}
    thresholds = {name: r.threshold for name, r in coordinator.records.items()}
    print(f"llmbench ab: interrupted after {coordinator.progress.pairs} pairs; decided so far:",
          file=sys.stderr)
    for c in sequential.judge_family(pairs, thresholds, coordinator.design):
        print(f"  {c.name}: {c.verdict} (ratio {c.ratio:.3f}, CI [{c.ci_low:.3f}, "
              f"{c.ci_high:.3f}], {c.n_pairs} pairs)", file=sys.stderr)


def cmd_ab(args: argparse.Namespace) -> int:
    from llmbench import ab, gate
    from llmbench.gate.options import gate_options

    ab.end_on_sigterm()
    result = ab.run_ab(args.rev, budget_s=args.budget, max_pairs=args.max_pairs,
                       pytest_args=args.pytest_args, options=gate_options(vars(args)),
                       keep=args.keep, log=sys.stderr, on_interrupt=_print_decided,
                       disturbed_share=args.disturbed_share)
    if args.keep is not None and result.comparisons:
        from pathlib import Path

        from llmbench.report.verdict_plot import FILE, draw_verdicts  # matplotlib: only here

        print(f"llmbench ab: verdicts drawn in {draw_verdicts(result, Path(args.keep) / FILE)}",
              file=sys.stderr)
    print(gate.render(result, args.format))
    return result.exit_code


def register(subparsers) -> None:
    """Add `ab` to the `llmbench` command."""
    from llmbench.ab import DEFAULT_BUDGET_S
    from llmbench.engine import disturbance
    from llmbench.gate.compare import parse_fraction
    from llmbench.gate.sequential import DEFAULT_MAX_PAIRS, FIRST_LOOK

    parser = subparsers.add_parser(
        COMMAND, help="A/B a git revision against the working tree, paired round by round",
        usage="llmbench ab REV [--budget DURATION] [--max-pairs N] [--keep DIR] "
              "[gate options] [-- PYTEST_ARGS ...]",
        description="Check REV out into a temporary git worktree and run its benchmark suite "
                    "(the baseline) and the working tree's (the candidate) as two processes "
                    "that take turns, one round at a time, so every observation is a pair "
                    "of rounds measured seconds apart. Each benchmark gets pairs until it "
                    "is decided (a group-sequential test on the pairs' log-ratios), within "
                    "the budget. The recommended check for a change on a noisy machine. "
                    "Pass pytest arguments after --, e.g. "
                    "`llmbench ab main -- --model tiny -k decode`.")
    parser.add_argument("rev", metavar="REV", help="the baseline revision, e.g. main or HEAD~1")
    parser.add_argument("--budget", type=duration, default=DEFAULT_BUDGET_S, metavar="DURATION",
                        help="wall time for the whole comparison, e.g. 10m or 90s; what is "
                             "undecided then is inconclusive, with the pairs it needs. "
                             "Default: 10m")
    parser.add_argument("--max-pairs", type=whole_number(FIRST_LOOK), default=DEFAULT_MAX_PAIRS,
                        metavar="N", help="most pairs for one benchmark. Default: %(default)r")
    parser.add_argument("--keep", default=None, metavar="DIR",
                        help="keep each side's run (and pairing.json, every pair) under DIR, "
                             "with the verdicts drawn as verdicts.png. Default: a temporary "
                             "folder, removed afterwards")
    parser.add_argument("--disturbed-share", type=parsed_by(parse_fraction, "share"),
                        default=disturbance.default_share_text(), metavar="PCT",
                        help="a pair is dropped and taken again when other processes (or the "
                             "hypervisor) took more than this share of a side's CPUs during "
                             f"either round; 100%% keeps every pair. Default: %(default)r "
                             f"(${disturbance.SHARE_ENV} sets it)")
    add_gate_arguments(parser)
    parser.set_defaults(func=cmd_ab, pytest_args=[])
