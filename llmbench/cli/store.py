"""`llmbench store push|pull|ls`: runs moved between a folder and a database a team shares,
and what a store holds.

    llmbench store push FOLDER --to URL      # a folder's runs into a database (or a folder)
    llmbench store pull FOLDER [--store URL] # a database's runs into a folder
    llmbench store ls [--store URL] [ENV]    # environments, or one environment's runs

A run is copied byte for byte and never twice (its identity is its content hash): a second
push adds nothing. Exit codes: 0 done; 2 bad input, or runs left out because they could not
be read (the rest were copied; each is named on stderr).
"""

from __future__ import annotations

import argparse
import sys

from llmbench.cli.args import add_store_argument
from llmbench.errors import Exit, UserError


def _copy(source_location: str, target_location: str, environments) -> int:
    from llmbench import runs
    from llmbench.runs.transfer import copy_runs

    source, target = runs.open_store(source_location), runs.open_store(target_location)
    if source.name == target.name:
        raise UserError(f"{source.name} is both the source and the target: name another")
    held = source.environment_keys()
    unknown = [e for e in environments or () if e not in held]
    if unknown:
        raise UserError(f"{source.name} holds no runs of {', '.join(unknown)}; it holds "
                        f"{', '.join(held) or 'none'}")
    if not held:
        one = not source.is_database and runs.list_runs(source_location)
        raise UserError(f"{source.name} is one environment's folder: pass the folder above it "
                        "(one subfolder per environment)" if one else
                        f"{source.name} holds no saved runs (ENVIRONMENT/NNNN_*.json)")
    for key in environments or held:
        target.check_writable(key)
    done = copy_runs(source, target, environments)
    for source_ref, placed in done.added:
        print(f"added {source_ref.address} -> {placed.address}")
    for line in done.left_out:
        print(f"llmbench store: {line}", file=sys.stderr)
    print(f"{source.name} -> {target.name}: {done.summary()}")
    return Exit.USAGE if done.left_out else Exit.OK


def cmd_push(args: argparse.Namespace) -> int:
    return _copy(args.folder, args.to, args.environment)


def cmd_pull(args: argparse.Namespace) -> int:
    from llmbench import runs

    return _copy(runs.store_location(args.store), args.folder, args.environment)


def cmd_ls(args: argparse.Namespace) -> int:
    from llmbench import runs
    from llmbench.gate.render import text_table

    store = runs.open_store(runs.store_location(args.store))
    if args.environment is None:
        rows = [[key, str(len(store.refs(key)))] for key in store.environment_keys()]
        print(f"{store.name}: {len(rows)} environment{'' if len(rows) == 1 else 's'}")
        if rows:
            print("\n".join(text_table(["environment", "runs"], rows)))
        return Exit.OK
    refs = store.refs(args.environment)
    if not refs:
        raise UserError(f"{store.name} holds no runs of {args.environment}; it holds "
                        f"{', '.join(store.environment_keys()) or 'none'}")
    print("\n".join(text_table(["run", "label"],
                               [[f"{r.number:04d}", r.label] for r in refs])))
    return Exit.OK


def register(subparsers) -> None:
    """Add `store` (push, pull, ls) to the `llmbench` command."""
    parser = subparsers.add_parser(
        "store", help="move runs between a folder and a database; list a store",
        description="Move saved runs between stores without loss or duplicates (a run is "
                    "copied byte for byte, and never twice: its identity is its content "
                    "hash), or list what a store holds. Exit 0: done; 2: bad input, or "
                    "runs left out because they could not be read (each named).")
    commands = parser.add_subparsers(dest="store_command", required=True,
                                     parser_class=type(parser))
    push = commands.add_parser("push", help="a folder's runs into a store",
                               description="Copy every run of FOLDER (a baselines folder: "
                                           "one subfolder per environment) into --to.")
    push.add_argument("folder", metavar="FOLDER", help="a folder of saved runs")
    push.add_argument("--to", required=True, metavar="PATH|URL",
                      help="the store to copy into: sqlite:///FILE, "
                           "postgresql://USER@HOST/DB, or a folder")
    push.set_defaults(func=cmd_push)
    pull = commands.add_parser("pull", help="a store's runs into a folder",
                               description="Copy every run of --store into FOLDER (one "
                                           "subfolder per environment).")
    pull.add_argument("folder", metavar="FOLDER", help="the folder to copy into")
    add_store_argument(pull)
    pull.set_defaults(func=cmd_pull)
    for sub in (push, pull):
        sub.add_argument("--environment", action="append", default=None, metavar="ENV",
                         help="only this environment's runs (repeatable). Default: all")
    ls = commands.add_parser("ls", help="a store's environments, or one's runs",
                             description="List the environments a store holds and how many "
                                         "runs each, or, given ENV, its runs.")
    ls.add_argument("environment", metavar="ENV", nargs="?", default=None,
                    help="an environment: list its runs")
    add_store_argument(ls)
    ls.set_defaults(func=cmd_ls)
