"""`llmbench compare BASELINE CANDIDATE`: the regression gate between two saved runs.

Exit codes (llmbench.errors): 0 no regression (or both runs measured the same code), 1 at
least one regression (or, with --fail-on-inconclusive, an inconclusive benchmark), 2 the runs
cannot be compared, 6 slower benchmarks not confirmed (beyond the rounds' noise, not proven
beyond the noise between runs; `llmbench ab` decides them).
"""

from __future__ import annotations

import argparse

from llmbench.cli.args import add_gate_arguments, add_store_argument


def cmd_compare(args: argparse.Namespace) -> int:
    from llmbench import gate, runs
    from llmbench.gate.options import gate_options

    store = runs.store_location(args.store)
    baseline = runs.load_address(args.baseline, store)
    candidate = runs.load_address(args.candidate, store)
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
                    "BASELINE's store) supports it; runs of the same code get no verdict. "
                    "Exit 0: no regression; 1: a regression; 2: cannot compare; 6: slower "
                    "benchmarks not confirmed.")
    parser.add_argument("baseline", metavar="BASELINE",
                        help="a run's JSON, an environment folder (its newest run), or a "
                             "run of a database store: ENVIRONMENT/NNNN with --store, or "
                             "URL#ENVIRONMENT/NNNN")
    parser.add_argument("candidate", metavar="CANDIDATE", help="as BASELINE")
    add_store_argument(parser)
    add_gate_arguments(parser)
    parser.set_defaults(func=cmd_compare)
