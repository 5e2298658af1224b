"""`llmbench report RUN [--baseline B.json|latest] -o DIR`: report.md and PNG plots."""

from __future__ import annotations

import argparse

from llmbench import runs
from llmbench.cli.args import add_store_argument
from llmbench.errors import Exit, UserError
from llmbench.gate import options, summary_line

# The decision flags a report takes: it writes a report whatever the verdicts, so it has no
# --fail-on-inconclusive.
FLAGS = tuple(f for f in options.FLAGS if f is not options.FAIL_ON_INCONCLUSIVE)
BASELINE = "--baseline B.json|latest"


def cmd_report(args: argparse.Namespace) -> int:
    # matplotlib loads only when a report is asked for
    from llmbench.history.bisection import is_bisection
    from llmbench.report.bisect_report import write_bisect_report
    from llmbench.report.load_report import is_load_run, write_load_report
    from llmbench.report.write import json_document, latest_baseline, write_report

    document = json_document(args.run)
    for kind, matches, write in (("load run", is_load_run, write_load_report),
                                 ("bisection", is_bisection, write_bisect_report)):
        if not matches(document):
            continue
        if args.baseline is not None:
            raise UserError(f"--baseline compares suite runs: a {kind}'s report has no "
                            "baseline")
        markdown, pictures = write(document, args.out_dir, force=args.force)
        print(f"wrote {markdown} and {len(pictures)} plots: {', '.join(pictures) or 'none'}")
        return Exit.OK
    misuse = options.only_with(vars(args), BASELINE, FLAGS)
    if misuse and args.baseline is None:
        raise UserError(misuse)
    gate_options = options.gate_options(vars(args))
    store = runs.store_location(args.store)
    baseline = args.baseline
    if baseline == runs.LATEST:
        try:
            baseline = latest_baseline(args.run, store)
        except runs.NoBaseline as exc:
            baseline = None  # a first run is no error: its report simply compares nothing
            print(f"no baseline: {exc}; the report has no comparison")
        else:
            print(f"baseline: {baseline} (the latest run of this environment)")
    result = write_report(args.run, args.out_dir, baseline, force=args.force,
                          options=gate_options, store=store)
    drawn = [o.file for o in result.plots if o.path is not None]
    print(f"wrote {result.markdown} and {len(drawn)} plots: {', '.join(drawn) or 'none'}")
    for outcome in result.plots:
        if outcome.path is None:
            print(f"not drawn: {outcome.file} ({outcome.skipped})")
    if result.gate is not None:
        print(summary_line(result.gate))
    return Exit.OK


def register(subparsers) -> None:
    """Add the `report` subcommand to the `llmbench` command."""
    parser = subparsers.add_parser(
        "report", help="report.md (tables, verdicts, environment) and PNG plots for a run, "
                       "a saved load run or a saved bisection",
        description="Write DIR/report.md (per group: median, IQR, tokens/s, ms/token; with "
                    "--baseline, the gate's verdicts) and PNG plots with min-max whiskers. "
                    "Refuses a DIR that already holds a report unless --force.")
    parser.add_argument("run", metavar="RUN", help="a saved run's JSON, e.g. "
                        "baselines/<model>-<device>-<dtype>/NNNN_*.json, or an environment "
                        "folder (its newest run), or the JSON of `llmbench load --output` "
                        "(its levels, capacity, latency plot and timelines) or of "
                        "`llmbench bisect` (its answer and steps)")
    parser.add_argument("--baseline", metavar="B.json|latest", default=None,
                        help="a run to compare with: verdict columns, and overlaid on the "
                             "plots; 'latest': the newest other run of RUN's environment in "
                             "RUN's folder, if any (a run from another machine never is). "
                             "Default: %(default)r (no comparison)")
    add_store_argument(parser)
    parser.add_argument("-o", "--output", dest="out_dir", metavar="DIR", required=True,
                        help="folder for report.md and the plots (created if missing)")
    parser.add_argument("--force", action="store_true",
                        help="replace a report already in DIR instead of refusing")
    rule = parser.add_argument_group("decision rule (with --baseline; as in `llmbench compare`)")
    options.register(rule.add_argument, FLAGS)
    parser.set_defaults(func=cmd_report)
