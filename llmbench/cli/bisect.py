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
from llmbench.cli.args import add_store_argument
from llmbench.errors import Exit, UserError
from llmbench.gate import options

COMMAND = "bisect"
DEFAULT_BUDGET_S = 3600.0


def _again(args: argparse.Namespace) -> str:
    """The command that goes on where this one stopped: the same arguments, the revisions
    as the commits they named (a branch may have moved since)."""
    words = ["llmbench", COMMAND, args.good_sha, args.bad_sha, "--budget", f"{args.budget:g}s",
             "--output", str(args.output_used)]
    if args.threshold is not None:
        words += ["--threshold", f"{args.threshold!r}"]
    for name, value in args.threshold_for:
        words += ["--threshold-for", f"{name}={value!r}"]
    if args.alpha != options.ALPHA.default:
        words += ["--alpha", f"{args.alpha!r}"]
    if args.work:
        words += ["--work", "--work-threshold", f"{args.work_threshold!r}"]
    if args.all_parents:
        words.append("--all-parents")
    if args.pytest_args:
        words += ["--", *args.pytest_args]
    return shlex.join(words)


def _from_change_point(args: argparse.Namespace) -> None:
    """GOOD, BAD and the benchmark from the newest change point of a history."""
    from llmbench import history, runs

    folder, benchmark = args.change_point
    result = history.judge_history(history.load_history(
        folder, store=runs.store_location(args.store)))
    found = history.bisect_range(result, benchmark)
    print(f"llmbench bisect: {found.name}'s newest change point (x{found.ratio:.3f}): from run "
          f"{found.good_run:04d} ({found.good}) to run {found.bad_run:04d} ({found.bad})",
          file=sys.stderr)
    args.good, args.bad = found.good, found.bad
    args.pytest_args = [*args.pytest_args, *_environment_args(folder, args, result),
                        *([found.key] if found.key not in args.pytest_args else [])]


# The suite's options that set what the history's runs measured, by their environment field.
ENVIRONMENT_OPTIONS = (("model", "--model"), ("device", "--device"), ("dtype", "--dtype"),
                       ("threads", "--threads"), ("attn", "--attn"), ("kv_cache", "--cache"),
                       ("weights", "--weights"))


def _environment_args(folder: str, args: argparse.Namespace, result) -> list[str]:
    """The pytest options that measure what the history measured (its newest run's model,
    device, dtype, threads and engine settings), each unless the user gave it."""
    from llmbench import runs

    store = runs.store_location(args.store)
    address = (f"{folder}/{result.history.newest:04d}" if store and runs.is_database_url(store)
               else folder)
    env = runs.load_address(address, store, samples=False).environment
    given = {a.split("=", 1)[0] for a in args.pytest_args}
    extra = [f"{flag}={env[field]}" for field, flag in ENVIRONMENT_OPTIONS
             if env.get(field) is not None and flag not in given]
    if env.get("compile") and "--compile" not in given:
        extra.append("--compile")
    return extra


def _known(output: Path) -> str:
    """What the steps saved so far say of where the culprit lies, as a clause."""
    import json

    from llmbench.history import bisection

    try:
        known = bisection.range_words(json.loads(output.read_text("utf-8")), quote="")
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return ""
    return f"so far {known}; " if known else ""


def cmd_bisect(args: argparse.Namespace) -> int:
    from llmbench import ab
    from llmbench.ab import bisect
    from llmbench.gate.options import gate_options
    from llmbench.history import bisection as words

    if (args.change_point is None) == (args.good is None or args.bad is None) or (
            args.change_point is not None and (args.good or args.bad)):
        raise UserError("give GOOD and BAD, or --change-point ENV_FOLDER BENCHMARK, not both")
    ab.end_on_sigterm()
    options = gate_options(vars(args))
    ab.check_pytest_args(args.pytest_args)
    if args.change_point is not None:
        _from_change_point(args)
    root = ab.repo_root(".")
    args.good_sha, args.bad_sha = ab.resolve_rev(root, args.good), ab.resolve_rev(root, args.bad)
    args.output_used = args.output or bisect.default_output(args.good_sha, args.bad_sha,
                                                            args.work)
    try:
        found, output = bisect.bisect(args.good, args.bad, budget_s=args.budget,
                                      pytest_args=args.pytest_args, options=options,
                                      output=args.output_used, log=sys.stderr,
                                      work=args.work, all_parents=args.all_parents)
    except KeyboardInterrupt:
        print(f"llmbench bisect: interrupted; {_known(args.output_used)}every step measured "
              f"so far is saved in {args.output_used}. To go on: {_again(args)}",
              file=sys.stderr)
        raise
    saved = found.to_dict()
    print(words.answer_line(saved, quote=""))
    if (step := words.culprit_step(saved)) is not None:
        print(f"  against its parent: {words.step_line(saved, step)}")
    elif found.answer == words.FOUND and found.reason:
        print(f"  not paired with its parent: {found.reason}")
    if (skipped := words.skipped_words(saved, quote="")) is not None:
        print(f"  {skipped}")
    print(f"{len(found.steps)} step(s), {sum(s.seconds for s in found.steps):.0f} s measured; "
          f"saved in {output}")
    if found.answer in (words.FOUND, words.NONE_SLOWER):
        return Exit.OK
    if found.answer == words.STOPPED:
        print(f"to go on with more time: {_again(args)}", file=sys.stderr)
    return Exit.REGRESSION


def register(subparsers) -> None:
    """Add `bisect` to the `llmbench` command."""
    parser = subparsers.add_parser(
        COMMAND, help="find the first commit in GOOD..BAD that made the benchmarks slower, "
                      "by paired A/B",
        usage="llmbench bisect (GOOD BAD | --change-point ENV_FOLDER BENCHMARK) "
              "[--budget DURATION] [--output FILE] [decision flags] [-- PYTEST_ARGS ...]",
        description="Pair GOOD against BAD (llmbench ab between two commits) on the selected "
                    "benchmarks; then halve GOOD..BAD along first parents (--all-parents: "
                    "every commit), pairing GOOD against the commit that halves what is "
                    "open on the benchmarks BAD made slower, until one "
                    "commit is left, and pair it against its parent. An undecided step is "
                    "never guessed; a commit that cannot be measured is skipped. Pass "
                    "pytest arguments after --, e.g. "
                    "`llmbench bisect v1.2 main -- --model tiny -k decode`.")
    parser.add_argument("good", metavar="GOOD", nargs="?",
                        help="a revision whose speed is the reference")
    parser.add_argument("bad", metavar="BAD", nargs="?",
                        help="a later revision (GOOD must be its ancestor) that is slower")
    parser.add_argument("--change-point", nargs=2, default=None,
                        metavar=("ENV_FOLDER", "BENCHMARK"),
                        help="instead of GOOD and BAD: the commits around the newest change "
                             "point of BENCHMARK (its name, or a part only it has) in the "
                             "history of ENV_FOLDER (as `llmbench history` reads it), "
                             "bisected on that benchmark")
    add_store_argument(parser)
    parser.add_argument("--budget", type=duration, default=DEFAULT_BUDGET_S,
                        metavar="DURATION", help="wall time for every step together, e.g. "
                                                 "45m; each step gets an equal share of what "
                                                 "is left. Default: 60m")
    parser.add_argument("--output", type=Path, default=None, metavar="FILE",
                        help="where the bisection is saved after every step; run the same "
                             "command again to reuse its steps. Default: "
                             "bisect-GOOD8-BAD8.json here")
    parser.add_argument("--all-parents", action="store_true",
                        help="bisect every commit of GOOD..BAD, those merges brought in "
                             "included, not only the first-parent line")
    parser.add_argument("--work", action="store_true",
                        help="bisect counted work (ops, FLOPs, bytes) instead of time: one "
                             "suite run per commit, one round per case, compared exactly, no "
                             "pairing")
    # What decides a step: the threshold and the confidence for time, the work threshold
    # for --work (memory is judged by `llmbench compare`).
    options.register(parser.add_argument, (options.THRESHOLD, options.THRESHOLD_FOR,
                                           options.ALPHA, options.WORK_THRESHOLD))
    parser.set_defaults(func=cmd_bisect, pytest_args=[])
