"""`llmbench compare BASELINE CANDIDATE`: the regression gate between two saved runs.

Exit codes (llmbench.errors): 0 no regression (or both runs measured the same code), 1 at
least one regression (or, with --fail-on-inconclusive, an inconclusive benchmark), 2 the runs
cannot be compared, 6 slower benchmarks not confirmed (beyond the rounds' noise, not proven
beyond the noise between runs; `llmbench ab` decides them).
"""

from __future__ import annotations

import argparse

from llmbench.cli.args import add_gate_arguments


def cmd_compare(args: argparse.Namespace) -> int:
    from llmbench import gate, runs
    from llmbench.gate.options import gate_options

    baseline, candidate = runs.load_run(args.baseline), runs.load_run(args.candidate)
    result = gate.compare_runs(baseline, candidate, gate_options(vars(args)),
                               history=runs.saved_history(baseline, candidate))
    print(gate.render(result, args.format))
    return result.exit_code


def register(subparsers) -> None:
    """Add `compare` to the `llmbench` command."""
    parser = subparsers.add_parser(
        "compare", help="regression verdicts between two saved runs",
        description="Compare CANDIDATE against BASELINE benchmark by benchmark: ratio of "
                    "medians with a bootstrap CI, a rank test with Holm's correction, and a "
                    "verdict, kept only where the noise between runs (learned from "
                    "BASELINE's folder) supports it; runs of the same code get no verdict. "
                    "Exit 0: no regression; 1: a regression; 2: cannot compare; 6: slower "
                    "benchmarks not confirmed.")
    parser.add_argument("baseline", metavar="BASELINE",
                        help="a run's JSON, or an environment folder (its newest run)")
    parser.add_argument("candidate", metavar="CANDIDATE",
                        help="a run's JSON, or an environment folder (its newest run)")
    add_gate_arguments(parser)
    parser.set_defaults(func=cmd_compare)
