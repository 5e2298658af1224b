"""`llmbench load`: load against any server, closed or open loop, judged against objectives,
and the search for the highest rate it holds within them.

Closed loop (`--concurrency 1,4,16`) or open loop (`--rate 2,4,8`, Poisson by default), one
level per value; with `--slo` each level is judged (see `llmbench.load.objectives`); with
`--find-capacity` the rates are chosen by the search (`llmbench.load.capacity`). One summary
line per level goes to stderr, the full JSON (one record per level, every request's
sample) to stdout or --output; `--records` adds one JSON line per request, `--plot` a
picture. Exit codes: see `cmd_load`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from llmbench import argtypes
from llmbench.cli.args import (
    add_sampling_arguments,
    positive_int,
    positive_seconds,
    sampling_params,
)
from llmbench.engine.config import EngineConfig, default_of
from llmbench.errors import Exit, UserError
from llmbench.load.config import APIS, CONNECTION_ERROR, SESSION_ENDED, LoadConfig
from llmbench.load.objectives import MET, Objectives, parse_objectives
from llmbench.load.schedule import ARRIVALS, Arrivals
from llmbench.load.workload import Workload, parse_lengths

non_negative_int = argtypes.whole_number(0)
positive_number = argtypes.number("a number", lambda v: 0 < v < math.inf, "> 0")
non_negative_number = argtypes.number("a number", lambda v: 0 <= v < math.inf, ">= 0")
percentile = argtypes.number("a percentile", lambda v: 0 < v < 100, "between 0 and 100")


def _levels(kind: Callable) -> Callable[[str], list]:
    def parse(text: str) -> list:
        levels = [kind(part.strip()) for part in text.split(",") if part.strip()]
        if not levels:
            raise argparse.ArgumentTypeError(f"expected values like 1,4,16, got {text!r}")
        return levels

    return parse


def register(subparsers) -> None:
    """Add `load` to the `llmbench` subcommands."""
    c = lambda name: default_of(LoadConfig, name)  # noqa: E731
    load = subparsers.add_parser(
        "load", help="send streamed requests, closed loop or at arrival rates, and report "
                     "TTFT, ITL, TPOT, latency, throughput, goodput within objectives and "
                     "the capacity at them",
        description="Throughputs and percentiles count served requests only: an error, an "
                    "empty answer, or with --fixed-length a short one, is a failure, "
                    "counted per reason. Exit status: 0 when every request was served (and "
                    "with --slo every level met the objectives; with --find-capacity, a "
                    "capacity was found), 1 otherwise (the JSON is written either way), 2 "
                    "on a usage error, or when no request reached a server that accepted "
                    "it.")
    load.add_argument("--url", default=LoadConfig().url, metavar="URL",
                      help="the server's base URL. Default: %(default)r")
    load.add_argument("--api", choices=APIS, default=c("api"), help="Default: %(default)r")
    shape = load.add_mutually_exclusive_group()
    shape.add_argument("--concurrency", type=_levels(positive_int), default=None,
                       metavar="N[,N...]", help="closed loop: levels of requests kept "
                                                "running, e.g. 1,4,16. Default: 1")
    shape.add_argument("--rate", type=_levels(positive_number), default=None,
                       metavar="R[,R...]", help="open loop: arrival rates in requests per "
                                                "second, one level each, e.g. 1,2,4, on a "
                                                "schedule seeded by --seed (0 when not "
                                                "given); with --find-capacity, the rate to "
                                                "start from (default 1)")
    load.add_argument("--arrival", choices=ARRIVALS, default="poisson",
                      help="open loop: how arrivals are spread. Default: %(default)r")
    load.add_argument("--burstiness", type=positive_number, default=1.0, metavar="B",
                      help="with --arrival gamma: the gaps' shape (below 1 burstier than "
                           "Poisson, above 1 more regular). Default: 1")
    load.add_argument("--requests", type=positive_int, default=None, metavar="N",
                      help="requests per level, warm-up and cool-down included. Default: "
                           f"{c('num_requests')}, or with --slo the fewest that can claim "
                           "its percentile plus the warm-up and cool-down")
    load.add_argument("--warmup", type=non_negative_int, default=0, metavar="N",
                      help="first requests of each level sent but left out of the figures. "
                           "Default: 0")
    load.add_argument("--cooldown", type=non_negative_int, default=0, metavar="N",
                      help="last requests of each level sent but left out. Default: 0")
    load.add_argument("--input-tokens", default=None, metavar="DIST",
                      help="prompt lengths in tokens, cut from the shipped passage: N, "
                           "uniform:LOW:HIGH, normal:MEAN:SD or file:PATH (one length per "
                           "line). Default: the shipped short questions")
    load.add_argument("--output-tokens", default=None, metavar="DIST",
                      help="each request's token limit, drawn as --input-tokens is. "
                           "Default: --max-new-tokens for every request")
    load.add_argument("--shared-prefix", type=non_negative_int, default=0, metavar="N",
                      help="begin every prompt with an N-token prefix shared by its group "
                           "(a system prompt many users send). Default: 0")
    load.add_argument("--prefix-groups", type=positive_int, default=1, metavar="G",
                      help="with --shared-prefix: request i (with --turns, session i) "
                           "gets group i mod G's prefix. Default: 1")
    load.add_argument("--turns", default=None, metavar="DIST",
                      help="multi-turn sessions: requests form conversations of this many "
                           "turns (drawn as --input-tokens is), each turn sent after the "
                           "previous answer with the conversation so far; --rate still "
                           "counts requests. Default: every request on its own")
    load.add_argument("--think-time", type=non_negative_number, default=0.0, metavar="MS",
                      help="with --turns: milliseconds from an answer to the session's next "
                           "turn. Default: 0")
    load.add_argument("--slo", default=None, metavar="METRIC=MS[,...]",
                      help="objectives in milliseconds per request: ttft, itl (the "
                           "request's mean inter-token latency; also tpot), e2e; e.g. "
                           "ttft=500,itl=50")
    load.add_argument("--slo-percentile", type=percentile, default=99.0, metavar="P",
                      help="the percentile each objective holds at. Default: 99")
    load.add_argument("--find-capacity", action="store_true",
                      help="search the highest open-loop rate whose levels meet every "
                           "--slo objective (needs --slo)")
    load.add_argument("--capacity-budget", type=argtypes.duration, default=600.0,
                      metavar="TIME", help="with --find-capacity: the search's time limit, "
                                           "e.g. 10m. Default: 10m")
    load.add_argument("--capacity-tolerance", type=positive_number, default=0.10,
                      metavar="F", help="with --find-capacity: stop when the lowest rate "
                                        "not met is within this fraction of the highest "
                                        "met. Default: 0.1")
    load.add_argument("--workers", type=positive_int, default=c("workers"), metavar="N",
                      help="open loop: spread each level's schedule over N client processes, "
                           "for rates one cannot keep (see --max-lag). Default: 1")
    load.add_argument("--ray", metavar="ADDRESS", default=None,
                      help="open loop: run the --workers as actors of the Ray cluster at "
                           "ADDRESS (auto, HOST:PORT or ray://HOST:PORT), spread over its "
                           "machines, for rates one machine cannot keep; needs "
                           "'llmbench[cluster]' on every machine")
    load.add_argument("--max-lag", type=positive_number, default=c("max_lag_s") * 1e3,
                      metavar="MS", help="open loop: the client's lag behind its schedule "
                                         "(at --lag-percentile) beyond which a level is "
                                         "reported as the client's limit, not the server's. "
                                         "Default: %(default)g")
    load.add_argument("--lag-percentile", type=positive_number,
                      default=c("lag_percentile"), metavar="P",
                      help="open loop: the percentile of the requests' lags that --max-lag "
                           "bounds; lower it where the client is descheduled now and then "
                           "(a small machine the server fills) but keeps its rate. "
                           "Default: %(default)g")
    load.add_argument("--model", default=default_of(EngineConfig, "model"), metavar="NAME",
                      help="whose tokenizer counts the tokens (also sent as the OpenAI "
                           "`model` field). Default: %(default)r")
    add_sampling_arguments(load)
    load.add_argument("--no-chat", action="store_true",
                      help="raw prompts: no chat template (native), /v1/completions (openai)")
    load.add_argument("--timeout", type=positive_seconds, default=c("timeout_s"), metavar="S",
                      help="per-request timeout in seconds. Default: %(default)r")
    load.add_argument("--duration", type=positive_seconds, default=c("duration_s"), metavar="S",
                      help="cap on each level's wall time; requests still running are cut "
                           "off and counted as errors. Default: no cap")
    load.add_argument("--output", type=Path, default=None, metavar="FILE",
                      help="write the JSON here (refused if FILE exists). Default: stdout")
    load.add_argument("--records", type=Path, default=None, metavar="FILE",
                      help="also write one JSON line per request (refused if FILE exists)")
    load.add_argument("--plot", type=Path, default=None, metavar="FILE",
                      help="also draw latency against throughput and the last level's "
                           "timeline, PNG or SVG by the suffix (refused if FILE exists)")
    load.set_defaults(func=cmd_load)


def _objectives(args: argparse.Namespace) -> Objectives | None:
    if args.slo is None:
        if args.find_capacity:
            raise UserError("--find-capacity searches the highest rate within objectives: "
                            "add --slo, e.g. --slo ttft=500,itl=50")
        return None
    return parse_objectives(args.slo, args.slo_percentile)


def _num_requests(args: argparse.Namespace, objectives: Objectives | None) -> int:
    """--requests, or its default; refused when the measured requests could never claim
    the objectives' percentile."""
    left_out = args.warmup + args.cooldown
    if objectives is None:
        return args.requests or default_of(LoadConfig, "num_requests")
    needed = objectives.minimum_requests
    if args.requests is None:
        return needed + left_out
    if args.requests - left_out < needed:
        raise UserError(
            f"--slo at p{objectives.percentile:g} needs at least {needed} measured requests "
            f"per level to claim it at 99% confidence (MLPerf's early-stopping rule); "
            f"--requests {args.requests} less {left_out} left out measures "
            f"{max(args.requests - left_out, 0)}: pass --requests {needed + left_out} or "
            "more, or a lower --slo-percentile")
    return args.requests


def _open_loop_flags_alone(args: argparse.Namespace) -> None:
    if args.rate is None and not args.find_capacity and (
            args.arrival != "poisson" or args.burstiness != 1.0):
        raise UserError("--arrival and --burstiness shape an open-loop schedule: add --rate")
    if args.find_capacity and args.rate is not None and len(args.rate) > 1:
        raise UserError("--find-capacity chooses its own rates: give --rate one starting "
                        "rate, or none")


def _seed(args: argparse.Namespace) -> int:
    """The schedule's and the workload's seed: --seed when given, so two runs with the same
    flags send the same requests at the same moments."""
    return 0 if args.seed is None else args.seed


PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def _refuse_unwritable(*paths: Path | None) -> None:
    """Refused before any request: a file that exists (nothing is overwritten), a folder
    that does not, a picture whose suffix names no format."""
    for path in paths:
        if path is None:
            continue
        if path.exists():
            raise UserError(f"{path} exists: remove it or choose another file")
        if not path.parent.is_dir():
            raise UserError(f"{path}: the folder {path.parent} does not exist")


def _refuse_bad_plot(path: Path | None) -> None:
    if path is not None and path.suffix.lower() not in PLOT_SUFFIXES:
        raise UserError(f"--plot {path}: name a .png, .svg or .pdf file")


def cmd_load(args: argparse.Namespace) -> int:
    """Exit 0 when every request of every level was served, the client kept every open-loop
    schedule, and with --slo every level met the objectives (with --find-capacity: a
    capacity was found, whatever the levels above it did); 1 otherwise: the figures then
    describe only the requests that survived, a rate the client did not offer, or a
    server outside its objectives, and a script must not take them as a pass. The JSON is
    written either way. 2 is a usage error: bad flags, or a first level where no request
    reached a server that accepted it (nothing listening at --url, the wrong --api, or a
    request the server refuses with 4xx)."""
    from llmbench.engine.models import load_tokenizer
    from llmbench.engine.prompts import passage, questions

    objectives = _objectives(args)
    _open_loop_flags_alone(args)
    _refuse_unwritable(args.output, args.records, args.plot)
    _refuse_bad_plot(args.plot)
    num_requests = _num_requests(args, objectives)

    def arrivals(rate: float) -> Arrivals:
        return Arrivals(rate, args.arrival, args.burstiness, _seed(args))

    open_loop = args.rate is not None or args.find_capacity
    # Every level is this one with its own rate or concurrency; a bad schedule or
    # combination is refused here, before any request.
    base = LoadConfig(url=args.url, api=args.api, num_requests=num_requests,
                      chat=not args.no_chat, model=args.model, timeout_s=args.timeout,
                      duration_s=args.duration, warmup=args.warmup, cooldown=args.cooldown,
                      max_lag_s=args.max_lag / 1e3,
                      lag_percentile=args.lag_percentile, workers=args.workers,
                      ray_address=args.ray,
                      think_s=args.think_time / 1e3,
                      arrivals=arrivals((args.rate or [1.0])[0]) if open_loop else None)
    for rate in (args.rate or []):
        arrivals(rate)
    workload = Workload(
        input_tokens=(None if args.input_tokens is None
                      else parse_lengths(args.input_tokens, "--input-tokens")),
        output_tokens=(None if args.output_tokens is None
                       else parse_lengths(args.output_tokens, "--output-tokens")),
        prefix_tokens=args.shared_prefix, prefix_groups=args.prefix_groups,
        turns=None if args.turns is None else parse_lengths(args.turns, "--turns", "turns"),
        seed=_seed(args))
    if workload.turns is None and args.think_time:
        raise UserError("--think-time is the pause between a session's turns: add --turns")
    if args.ray is not None:  # a cluster that cannot be joined, before any request
        from llmbench.load import cluster

        cluster.join(args.ray)
    params = sampling_params(args)
    tokenizer = load_tokenizer(args.model)
    requests = (questions() if workload.is_default
                else workload.plan(num_requests, tokenizer, passage(), questions()))
    runner = _LevelRunner(params, tokenizer, requests, objectives)

    capacity = None
    if args.find_capacity:
        from llmbench.load.capacity import Search, find_capacity

        search = Search(start_rate=(args.rate or [1.0])[0], tolerance=args.capacity_tolerance,
                        budget_s=args.capacity_budget)
        capacity = find_capacity(
            lambda rate: runner.run(replace(base, arrivals=arrivals(rate))),
            search, seconds_per_level=lambda rate: num_requests / rate)
        print(capacity.line(), file=sys.stderr)
    elif args.rate is not None:
        for rate in args.rate:
            runner.run(replace(base, arrivals=arrivals(rate)))
    else:
        for level in args.concurrency or [default_of(LoadConfig, "concurrency")]:
            runner.run(replace(base, concurrency=level))

    document = {"url": args.url, "api": args.api, "model": args.model,
                "workload": workload.describe(), "levels": runner.levels,
                "capacity": None if capacity is None else capacity.to_dict()}
    _write(document, args)
    return _exit_code(runner.levels, capacity)


class _LevelRunner:
    """Runs levels one after another, prints each one's lines, keeps their records."""

    def __init__(self, params, tokenizer, prompts, objectives: Objectives | None):
        self.params, self.tokenizer, self.prompts = params, tokenizer, prompts
        self.objectives = objectives
        self.levels: list[dict] = []

    def run(self, config: LoadConfig):
        from tqdm import tqdm

        from llmbench.load.client import run_load
        from llmbench.load.result import summary_line

        label = (config.arrivals.describe() if config.arrivals is not None
                 else f"concurrency {config.concurrency}")
        with tqdm(total=config.num_requests, desc=label, unit="req", file=sys.stderr,
                  disable=None) as bar:
            result = run_load(config, self.params, self.tokenizer, self.prompts,
                              progress=bar.update, objectives=self.objectives)
        if not self.levels and _is_refused(result):
            raise UserError(f"no request was accepted at {label} "
                            f"({result.samples[0].error}): is a server running at "
                            f"{config.url} with the {config.api} API, and do the flags "
                            "suit it?")
        print(summary_line(result.summary()), file=sys.stderr)
        self.levels.append(result.to_dict())
        return result


def _write(document: dict, args: argparse.Namespace) -> None:
    """The JSON, the per-request records and the picture; "x" mode: never overwrite."""
    text = json.dumps(document, indent=2)
    if args.output is None:
        print(text)
    else:
        with open(args.output, "x", encoding="utf-8") as fh:
            fh.write(text + "\n")
    if args.records is not None:
        with open(args.records, "x", encoding="utf-8") as fh:
            for number, level in enumerate(document["levels"]):
                for sample in level["samples"]:
                    fh.write(json.dumps({"level": number, "load": level["summary"]["load"],
                                         **sample}) + "\n")
    if args.plot is not None:
        from llmbench.load.plot import draw

        with open(args.plot, "x"):  # claimed first, so a file appearing meanwhile is kept
            pass
        draw(document, args.plot)


def _exit_code(levels: list[dict], capacity) -> int:
    summaries = [level["summary"] for level in levels]
    if capacity is not None:
        return Exit.OK if capacity.met_rate is not None else Exit.REGRESSION
    failed = [s for s in summaries if s["num_errors"]]
    missed = [s for s in summaries
              if s["objectives"] is not None and s["objectives"]["verdict"] != MET]
    behind = [s for s in summaries if not s["client_kept_schedule"]]
    if failed:
        print(f"llmbench load: failed: {sum(s['num_errors'] for s in failed)} of "
              f"{sum(s['num_requests'] for s in summaries)} requests, at "
              f"{', '.join(s['load'] for s in failed)}", file=sys.stderr)
    if missed:
        print(f"llmbench load: objectives not met at {', '.join(s['load'] for s in missed)}",
              file=sys.stderr)
    if behind:
        print(f"llmbench load: the client fell behind its schedule at "
              f"{', '.join(s['load'] for s in behind)}: those levels measured a lower rate "
              "than asked (see --max-lag)", file=sys.stderr)
    return Exit.REGRESSION if failed or missed or behind else Exit.OK


def _is_refused(result) -> bool:
    """True when every request failed before the server would serve it: no connection, or
    a 4xx other than 408 and 429 (those say "not now", not "not like this")."""
    def refused(reason: str | None) -> bool:
        return reason == CONNECTION_ERROR or (
            reason is not None and reason.startswith("HTTP 4")
            and reason not in ("HTTP 408", "HTTP 429"))

    # A session's later turns are never sent once its first is refused.
    sent = [s for s in result.samples if s.reason != SESSION_ENDED]
    return bool(sent) and not result.num_cut_off and all(refused(s.reason) for s in sent)
