"""`llmbench bisect GOOD BAD [-- PYTEST_ARGS]`: the first commit in GOOD..BAD whose benchmarks
got slower beyond the threshold, each step a paired A/B (`llmbench.ab.bisect`). The steps
go to stderr as they end, the answer to stdout; the whole bisection is saved as JSON.

Exit codes: 0 when it has an answer (the culprit, or no commit slower), 1 when it stopped
short of one (an undecided step, the budget spent, or a range only skipped commits keep
open: it says which range), 2 on bad arguments or when GOOD against BAD cannot be
measured, 130 on Ctrl-C (what is known is printed, with the command that goes on).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from llmbench.argtypes import duration
from llmbench.errors import Exit

COMMAND = "bisect"
DEFAULT_BUDGET_S = 3600.0


def _again(args: argparse.Namespace) -> str:
    """The command that goes on where this one stopped (the same arguments)."""
    words = ["llmbench", COMMAND, args.good, args.bad, "--budget", f"{args.budget:.0f}s",
             "--output", str(args.output_used)]
    if args.pytest_args:
        words += ["--", *args.pytest_args]
    return shlex.join(words)


def cmd_bisect(args: argparse.Namespace) -> int:
    from llmbench import ab
    from llmbench.ab import bisect
    from llmbench.gate.options import gate_options

    ab.end_on_sigterm()
    options = gate_options(vars(args))
    ab.check_pytest_args(args.pytest_args)
    root = ab.repo_root(".")
    args.output_used = args.output or bisect.default_output(
        ab.resolve_rev(root, args.good), ab.resolve_rev(root, args.bad))
    try:
        found, output = bisect.bisect(args.good, args.bad, budget_s=args.budget,
                                      pytest_args=args.pytest_args, options=options,
                                      output=args.output_used, log=sys.stderr)
    except KeyboardInterrupt:
        print(f"llmbench bisect: interrupted; every step measured so far is saved in "
              f"{args.output_used}. To go on: {_again(args)}", file=sys.stderr)
        raise
    print(found.answer_line())
    if (step := bisect.culprit_step(found)) is not None:
        print(f"  against its parent: {step.line(found.name)}")
    if (skipped := found.skipped_line()) is not None:
        print(f"  {skipped}")
    print(f"{len(found.steps)} step(s), {sum(s.seconds for s in found.steps):.0f} s measured; "
          f"saved in {output}")
    if found.answer in (bisect.FOUND, bisect.NONE_SLOWER):
        return Exit.OK
    print(f"to go on with more time: {_again(args)}", file=sys.stderr)
    return Exit.REGRESSION


def register(subparsers) -> None:
    """Add `bisect` to the `llmbench` command."""
    from llmbench.gate import options

    parser = subparsers.add_parser(
        COMMAND, help="find the first commit in GOOD..BAD that made the benchmarks slower, "
                      "by paired A/B",
        usage="llmbench bisect GOOD BAD [--budget DURATION] [--output FILE] "
              "[decision flags] [-- PYTEST_ARGS ...]",
        description="Pair GOOD against BAD (llmbench ab between two commits) on the selected "
                    "benchmarks; then halve GOOD..BAD along first parents, pairing GOOD "
                    "against the middle commit on the benchmarks BAD made slower, until one "
                    "commit is left, and pair it against its parent. An undecided step is "
                    "never guessed; a commit that cannot be measured is skipped. Pass "
                    "pytest arguments after --, e.g. "
                    "`llmbench bisect v1.2 main -- --model tiny -k decode`.")
    parser.add_argument("good", metavar="GOOD", help="a revision whose speed is the reference")
    parser.add_argument("bad", metavar="BAD", help="a later revision (GOOD must be its "
                                                   "ancestor) that is slower")
    parser.add_argument("--budget", type=duration, default=DEFAULT_BUDGET_S,
                        metavar="DURATION", help="wall time for every step together, e.g. "
                                                 "45m; each step gets an equal share of what "
                                                 "is left. Default: 60m")
    parser.add_argument("--output", type=Path, default=None, metavar="FILE",
                        help="where the bisection is saved after every step; run the same "
                             "command again to reuse its steps. Default: "
                             "bisect-GOOD8-BAD8.json here")
    # What decides a step: the threshold and the confidence (timings only; counted work
    # and memory are judged by `llmbench compare`).
    options.register(parser.add_argument, (options.THRESHOLD, options.THRESHOLD_FOR,
                                           options.ALPHA))
    parser.set_defaults(func=cmd_bisect, pytest_args=[])
