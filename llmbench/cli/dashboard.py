"""`llmbench dashboard BASELINES_DIR -o SITE_DIR`: a static web site of the saved runs.

Exit codes: 0 the site was written (files it could not read are named on its pages and on
stderr), 2 bad input (no runs at all, a SITE_DIR holding something else), one line each.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from llmbench import runs
from llmbench.cli.args import add_store_argument
from llmbench.errors import UserError
from llmbench.gate import options


def cmd_dashboard(args: argparse.Namespace) -> int:
    from llmbench.dashboard import build_site  # matplotlib and jinja2: only now

    if args.baselines is not None and args.store is not None:
        raise UserError("BASELINES_DIR and --store both name the runs: pass one")
    source = args.baselines or runs.store_location(args.store)
    record = build_site(source if runs.is_database_url(source) else Path(source),
                        Path(args.output), ab_folders=[Path(f) for f in args.ab],
                        bisect_files=[Path(f) for f in args.bisect], alpha=args.alpha)
    for slug, env in record["environments"].items():
        for problem in env["problems"]:
            print(f"llmbench dashboard: {slug}: {problem}", file=sys.stderr)
    for kept in (*record["ab"], *record["bisect"]):
        if kept["problem"]:
            print(f"llmbench dashboard: {kept['problem']}", file=sys.stderr)
    counts = ", ".join(f"{slug} ({env['runs']} runs, {env['benchmarks']} benchmarks)"
                       for slug, env in record["environments"].items())
    print(f"wrote {Path(args.output) / 'index.html'}: {counts}"
          + (f"; {len(record['ab'])} A/B" if record["ab"] else ""))
    return 0


def register(subparsers) -> None:
    """Add `dashboard` to the `llmbench` command."""
    parser = subparsers.add_parser(
        "dashboard", help="a static web site of the saved runs: trends, change points, work",
        description="Write a static site (no network needed to view it) of every environment "
                    "under BASELINES_DIR: an index with each benchmark's newest median, trend "
                    "and history verdict, one page per benchmark with its runs, change "
                    "points and counted work, a page per kept paired A/B (--ab) and per saved "
                    "bisection (--bisect). "
                    "Unreadable runs are left out and named. Exit 0: written; 2: bad input.")
    parser.add_argument("baselines", metavar="BASELINES_DIR", nargs="?", default=None,
                        help="the folder runs are saved in (one subfolder per environment), "
                             "or one environment's folder. Default: --store's")
    add_store_argument(parser)
    parser.add_argument("-o", "--output", metavar="SITE_DIR", required=True,
                        help="the site's folder: new, empty, or an earlier dashboard (which "
                             "is replaced); open SITE_DIR/index.html")
    parser.add_argument("--ab", metavar="DIR", action="append", default=[],
                        help="a folder `llmbench ab --keep DIR` wrote; repeatable")
    parser.add_argument("--bisect", metavar="FILE", action="append", default=[],
                        help="a bisection `llmbench bisect` saved: its page, linked from the "
                             "change points its range holds; repeatable")
    options.register(parser.add_argument, (options.ALPHA,))
    parser.set_defaults(func=cmd_dashboard)
