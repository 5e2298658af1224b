"""`llmbench history [ENV_DIR] [-k PATTERN]`: every saved run of one environment, the change
points in each benchmark's series, and the newest run's verdict against its own level.

Exit codes: 0 the newest run is consistent (or improves), 1 it is a regression beyond the
threshold, 2 bad input (too few runs, mixed environments, a damaged run), one line each.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from llmbench import runs
from llmbench.cli.args import add_store_argument
from llmbench.errors import UserError
from llmbench.gate import options
from llmbench.gate.render import FORMATS


def cmd_history(args: argparse.Namespace) -> int:
    from llmbench import history

    if args.force and args.plot_dir is None:
        raise UserError("--force applies with --plot-dir only: add --plot-dir DIR, or drop it")
    loaded = history.load_history(args.env_dir, pattern=args.pattern,
                                  store=runs.store_location(args.store))
    result = history.judge_history(loaded, threshold=args.threshold, alpha=args.alpha)
    if args.plot_dir is not None:
        _plot(result, Path(args.plot_dir), force=args.force)
    print(history.render(result, args.format))
    return result.exit_code


def _plot(result, out_dir: Path, *, force: bool) -> None:
    from llmbench.history.plot import draw_history, file_names  # matplotlib: only when asked

    taken = [f for f in file_names(result) if (out_dir / f).exists()]
    if taken and not force:
        raise UserError(f"{out_dir} already holds {', '.join(taken)}: pass another folder, "
                        "or --force to replace them")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        written = draw_history(result, out_dir)
    except OSError as exc:
        raise UserError(f"cannot write the plots to {out_dir}: {exc.strerror or exc}") from exc
    print(f"wrote {', '.join(str(p) for p in written)}", file=sys.stderr)


def register(subparsers) -> None:
    """Add `history` to the `llmbench` command."""
    parser = subparsers.add_parser(
        "history", help="change points across saved runs, and the newest run's verdict",
        usage="llmbench history [ENV_DIR] [-k PATTERN] [--threshold PCT] [--alpha A] "
              "[--format text|markdown|json] [--plot-dir DIR [--force]]",
        description="Read every numbered run of one environment, oldest first, and for each "
                    "benchmark find where its level shifted (the first run and commit after "
                    "each shift, its size and significance), then judge the newest run "
                    "against a prediction interval of its own level. Exit 0: consistent; "
                    "1: the newest run is a regression; 2: bad input.")
    parser.add_argument("env_dir", metavar="ENV_DIR", nargs="?", default=None,
                        help="an environment folder of saved runs, or a baselines folder "
                             "holding one; with a database --store, one of its "
                             "environments. Default: the store's only environment "
                             "(baselines, or --store)")
    add_store_argument(parser)
    parser.add_argument("-k", dest="pattern", metavar="PATTERN", default=None,
                        help="only benchmarks whose name contains PATTERN")
    options.register(parser.add_argument, (options.THRESHOLD, options.ALPHA))
    parser.add_argument("--format", choices=FORMATS, default=FORMATS[0],
                        help="Default: %(default)r")
    parser.add_argument("--plot-dir", metavar="DIR", default=None,
                        help="also draw history_<group>.png per group and "
                             "history_all_benchmarks.png into DIR (created if missing). "
                             "Default: no plots")
    parser.add_argument("--force", action="store_true",
                        help="with --plot-dir: replace plots already in DIR instead of refusing")
    parser.set_defaults(func=cmd_history)
