"""`llmbench report RUN.json [--baseline B.json|latest] -o DIR`: report.md and PNG plots."""

from __future__ import annotations

import argparse

from llmbench import gate
from llmbench import runs as baselines
from llmbench.errors import EXIT_OK, UserError


def _checked(parse):
    def check(text: str):
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    check.__name__ = parse.__name__.removeprefix("parse_")  # argparse names it in errors
    return check


def _alpha(text: str) -> float:
    value = float(text)
    if not 0 < value < 0.5:
        raise ValueError(f"must be in (0, 0.5), got {text}")
    return value


def cmd_report(args: argparse.Namespace) -> int:
    # matplotlib loads only when a report is asked for
    from llmbench.report.write import latest_baseline, write_report

    given = [flag for flag, value in (("--threshold", args.threshold),
                                      ("--threshold-for", args.threshold_for),
                                      ("--alpha", args.alpha != gate.DEFAULT_ALPHA),
                                      ("--normalize", args.normalize),
                                      ("--allow-mismatch", args.allow_mismatch)) if value]
    if given and args.baseline is None:
        raise UserError(f"{', '.join(given)} only apply with --baseline B.json")
    options = gate.GateOptions(threshold=args.threshold, threshold_for=dict(args.threshold_for),
                               alpha=args.alpha, normalize=args.normalize,
                               allow_mismatch=args.allow_mismatch)
    baseline = args.baseline
    if baseline == baselines.LATEST:
        try:
            baseline = latest_baseline(args.run)
        except baselines.NoBaseline as exc:
            baseline = None  # a first run is no error: its report simply compares nothing
            print(f"no baseline: {exc}; the report has no comparison")
        else:
            print(f"baseline: {baseline} (the latest run of this environment)")
    result = write_report(args.run, args.out_dir, baseline, force=args.force,
                          options=options)
    drawn = [o.file for o in result.plots if o.path is not None]
    print(f"wrote {result.markdown} and {len(drawn)} plots: {', '.join(drawn) or 'none'}")
    for outcome in result.plots:
        if outcome.path is None:
            print(f"not drawn: {outcome.file} ({outcome.skipped})")
    if result.gate is not None:
        print(gate.summary_line(result.gate))
    return EXIT_OK


def register(subparsers) -> None:
    """Add the `report` subcommand to the `llmbench` command."""
    parser = subparsers.add_parser(
        "report", help="report.md (tables, verdicts, environment) and PNG plots for a run",
        description="Write DIR/report.md (per group: median, IQR, tokens/s, ms/token; with "
                    "--baseline, the gate's verdicts) and PNG plots with min-max whiskers. "
                    "Refuses a DIR that already holds a report unless --force.")
    parser.add_argument("run", metavar="RUN.json", help="a saved run, e.g. "
                        "baselines/<model>-<device>-<dtype>/NNNN_*.json")
    parser.add_argument("--baseline", metavar="B.json|latest", default=None,
                        help="a run to compare with: verdict columns, and overlaid on the "
                             "plots; 'latest': the newest other run of RUN's environment in "
                             "RUN's folder, if any (a run from another machine never is). "
                             "Default: %(default)r (no comparison)")
    parser.add_argument("-o", "--output", dest="out_dir", metavar="DIR", required=True,
                        help="folder for report.md and the plots (created if missing)")
    parser.add_argument("--force", action="store_true",
                        help="replace a report already in DIR instead of refusing")
    rule = parser.add_argument_group("decision rule (with --baseline; as in `llmbench compare`)")
    rule.add_argument("--threshold", type=_checked(gate.parse_fraction), default=None,
                      metavar="PCT", help="practical threshold for the whole run, e.g. 10%%. "
                                          "Default: the device's")
    rule.add_argument("--threshold-for", type=_checked(gate.parse_threshold_for),
                      action="append", default=[], metavar="NAME=PCT",
                      help="threshold for one group or benchmark, e.g. decode=20%%; repeatable")
    rule.add_argument("--alpha", type=_checked(_alpha), default=gate.DEFAULT_ALPHA,
                      metavar="A", help="family-wise false-alarm rate. Default: %(default)r")
    rule.add_argument("--normalize", action="store_true",
                      help="divide the machine-speed ratio out of this run's samples")
    rule.add_argument("--allow-mismatch", action="store_true",
                      help="compare runs of different model, device, dtype or threads")
    parser.set_defaults(func=cmd_report)
