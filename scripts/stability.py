"""Where the spread between runs comes from: the same code in several fresh processes.

    python scripts/stability.py spread OUT --processes 4 [--env NAME=VALUE ...] \
        [--taskset CPUS] -- [PYTEST_ARGS]
    python scripts/stability.py table OUT [OUT ...]
    python scripts/stability.py runs RUN.json RUN.json [...]
    python scripts/stability.py watch [--cycles 150] [--processes 1] [--json FILE]

`spread` runs the benchmark suite (`pytest --benchmark-only --no-save`, plus PYTEST_ARGS) in
`--processes` fresh processes one after another, each writing its pytest-benchmark JSON under
OUT, with the environment variables given (one condition per OUT folder). `table` prints, for
each benchmark, the spread of its medians between processes (the standard deviation of log
medians) beside the spread its rounds show within one process (the standard error of a
process's log median, averaged over processes), and their ratio: a ratio near 1 means the
rounds see all the noise there is; far above 1, each process settles into a speed of its own
that its rounds cannot see. Several OUT folders print one column group each, so conditions
read side by side.

`runs` reads saved runs of the same code (a store's numbered runs, hours apart) and prints the
spread of each benchmark's median between them, as the stable-measurements pages report it:
the raw spread (median, 90th percentile and worst over the benchmarks), the control
workload's, the part every benchmark of a run shares (the run's median move, which the
host's speed makes), and the residual, each benchmark's own move beyond its run's (the part
that differs from case to case and process to process), beside the standard error the runs'
rounds give each median: a residual no larger is the rounds' noise, not a state a run or a
process adds. Each run's control factor and shared move are listed first, so a host that
moved shows as both moving together.

`watch` separates the host from the process: in each of `--processes` fresh processes it warms
the suite's model as the suite's fixture does, then times a few workloads (prefill of 32 and
128 tokens, 10 decode steps at context 128, a static batch of two, the control workload) one
round of each in turn for `--cycles` cycles, and prints each workload's spread round to round,
how its rolling level moved with the control workload's, and how far medians of ten
consecutive cycles spread, as they are and divided by the control's over the same cycles.
With several processes it prints the spread of the processes' medians too.

Measure alone: nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def _spread(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    for pair in args.env:
        name, _, value = pair.partition("=")
        env[name] = value
    condition = {"env": args.env, "taskset": args.taskset, "pytest_args": args.pytest_args}
    (out / "condition.json").write_text(json.dumps(condition, indent=2))
    prefix = ["taskset", "-c", args.taskset] if args.taskset else []
    first = len(list(out.glob("p*.json")))
    for i in range(first, first + args.processes):
        path = out / f"p{i:02d}.json"
        started = time.time()
        proc = subprocess.run([*prefix, sys.executable, "-m", "pytest", "--benchmark-only",
                               "--no-save", "-q", "-p", "no:cacheprovider",
                               f"--benchmark-json={path}", *args.pytest_args],
                              cwd=REPO, env=env, capture_output=True, text=True)
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or [""]
        print(f"{path.name}: exit {proc.returncode} in {time.time() - started:.0f} s: "
              f"{tail[0]}", flush=True)
        if proc.returncode != 0:
            (out / f"p{i:02d}.log").write_text(proc.stdout + proc.stderr)
    return 0


def _median_se(logs: list[float]) -> float:
    """The standard error of the median of `logs`: about 1.2533 times that of their mean."""
    return 1.2533 * statistics.stdev(logs) / math.sqrt(len(logs))


def _processes(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("p*.json"))]


def _figures(folder: Path) -> tuple[dict[str, tuple[float, float, float]], list[float]]:
    """{benchmark: (median of medians, between-process SD of log medians, mean within-process
    SE of the log median)}, and each process's median control time."""
    medians: dict[str, list[float]] = {}
    within: dict[str, list[float]] = {}
    controls = []
    for run in _processes(folder):
        control = (run.get("llmbench") or {}).get("control_s") or []
        if control:
            controls.append(statistics.median(control))
        for bench in run["benchmarks"]:
            logs = [math.log(x) for x in bench["stats"]["data"] if x > 0]
            if len(logs) < 2:
                continue
            name = bench["fullname"].split("::")[-1]
            medians.setdefault(name, []).append(statistics.median(logs))
            within.setdefault(name, []).append(_median_se(logs))
    figures = {}
    for name, logs in medians.items():
        if len(logs) >= 2:
            figures[name] = (math.exp(statistics.median(logs)), statistics.stdev(logs),
                             statistics.mean(within[name]))
    return figures, controls


def _table(args: argparse.Namespace) -> int:
    folders = [Path(f) for f in args.out]
    columns = [_figures(f) for f in folders]
    names = sorted({n for figures, _ in columns for n in figures})
    head = "| benchmark |" + "".join(
        f" {f.name}: median | between | within | ratio |" for f in folders)
    print(head)
    print("|:--|" + "--:|--:|--:|--:|" * len(folders))
    for name in names:
        cells = []
        for figures, _ in columns:
            if name in figures:
                median, between, within = figures[name]
                cells.append(f" {median * 1000:.1f} ms | {between:.1%} | {within:.1%} | "
                             f"x{between / within:.1f} |" if within else " | | | |")
            else:
                cells.append(" | | | |")
        print(f"| {name} |" + "".join(cells))
    for folder, (figures, controls) in zip(folders, columns, strict=True):
        spreads = sorted(b for _, b, _ in figures.values())
        if not spreads:
            continue
        worst = max(figures, key=lambda n: figures[n][1])
        control = (f"; control workload {min(controls) * 1000:.1f}-{max(controls) * 1000:.1f} ms"
                   if controls else "")
        print(f"\n{folder.name}: {len(_processes(folder))} processes; between-process spread "
              f"median {statistics.median(spreads):.1%}, worst {spreads[-1]:.1%} ({worst})"
              f"{control}")
    return 0


def _saved_run(path: str) -> dict:
    """A run llmbench's suite saved, or exit with one line saying why `path` is not one."""
    try:
        run = json.loads(Path(path).read_text())
        if run["benchmarks"] and run["llmbench"]["control_s"] and run["commit_info"]["id"]:
            return run
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise SystemExit(f"stability.py runs: {path}: not a run llmbench's suite saved "
                         f"({type(error).__name__}: {error})") from None
    raise SystemExit(f"stability.py runs: {path}: a run with no benchmarks or no control "
                     "workload")


def _runs(args: argparse.Namespace) -> int:
    if len(args.run) < 2:
        raise SystemExit("stability.py runs: the spread between runs needs two or more saved "
                         "runs of one code")
    runs = [_saved_run(path) for path in args.run]
    names = sorted(set.intersection(*({b["fullname"] for b in run["benchmarks"]}
                                      for run in runs)))
    if not names:
        raise SystemExit("stability.py runs: these runs share no benchmark")
    logs = np.array([[math.log(next(b["stats"]["median"] for b in run["benchmarks"]
                                    if b["fullname"] == name)) for run in runs]
                     for name in names])  # benchmarks x runs
    deviations = logs - logs.mean(axis=1, keepdims=True)
    shared = np.median(deviations, axis=0)  # each run's move, shared by its benchmarks
    residual = deviations - shared
    controls = np.log([statistics.median(run["llmbench"]["control_s"]) for run in runs])
    for run, move, control in zip(runs, shared, controls - controls.mean(), strict=True):
        print(f"{run['datetime'][:16]} {run['commit_info']['id'][:8]}: shared move "
              f"x{math.exp(move):.3f}, control x{math.exp(control):.3f}")
    raw, own = deviations.std(axis=1, ddof=1), residual.std(axis=1, ddof=1)
    # The standard error each run's rounds give its median, averaged over the runs: a
    # residual near it is the rounds' own noise, nothing a run or process adds.
    rounds_se = np.array([statistics.mean(
        _median_se([math.log(x) for x in data])
        for data in (next(b["stats"]["data"] for b in run["benchmarks"] if b["fullname"] == name)
                     for run in runs)) for name in names])
    print(f"\n{len(runs)} runs, {len(names)} benchmarks (SD of log medians): median "
          f"{np.median(raw):.2%}, 90th pct {np.percentile(raw, 90):.2%}, worst {raw.max():.2%} "
          f"({names[int(raw.argmax())].split('::')[-1]}); control {controls.std(ddof=1):.2%}; "
          f"shared move {shared.std(ddof=1):.2%}; residual median {np.median(own):.2%}, worst "
          f"{own.max():.2%} ({names[int(own.argmax())].split('::')[-1]}); residual over "
          f"the rounds' standard error: median x{np.median(own / rounds_se):.2f}")
    return 0


WATCHED = ("prefill32", "prefill128", "decode128", "batch2", "control")


def _watch_one(cycles: int) -> dict[str, list[float]]:
    """One process's rounds of each watched workload, in turn (run in a fresh process)."""
    import time

    import torch

    from llmbench.bench.control import ControlWorkload
    from llmbench.engine.batching import generate_static_batch
    from llmbench.engine.config import EngineConfig, SamplingParams
    from llmbench.engine.hf import hf_generate
    from llmbench.engine.loop import decode_step, generate, prefill, request_cache
    from llmbench.engine.models import load_model
    from llmbench.engine.prompts import exact_length_ids

    lm = load_model(EngineConfig(model="smollm2-135m", device="cpu"))
    prompt = exact_length_ids(lm.tokenizer, 128)
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    for _ in range(2):  # as the suite's model fixture warms it
        generate(lm, prompt, params)
        generate(lm, prompt[:16], params, use_cache=False)
    generate_static_batch(lm, [prompt, prompt[:64]], params)
    hf_generate(lm, prompt, params)
    control = ControlWorkload(torch.device("cpu"))

    @torch.inference_mode()
    def first_token(ids: list[int]) -> float:
        started = time.perf_counter()
        prefill(lm, torch.tensor([ids]), cache=request_cache(lm, len(ids)))
        return time.perf_counter() - started

    @torch.inference_mode()
    def decode() -> float:
        logits, cache = prefill(lm, torch.tensor([prompt]), cache=request_cache(lm, 138))
        token = logits.argmax(dim=-1, keepdim=True)
        started = time.perf_counter()
        for _ in range(10):
            logits, cache = decode_step(lm, token, cache)
            token = logits.argmax(dim=-1, keepdim=True)
        return time.perf_counter() - started

    def batch2() -> float:
        started = time.perf_counter()
        generate_static_batch(lm, [prompt[:64], prompt[37:101]], params)
        return time.perf_counter() - started

    workloads = dict(zip(WATCHED, (lambda: first_token(prompt[:32]), lambda: first_token(prompt),
                                   decode, batch2, control.measure), strict=True))
    rounds: dict[str, list[float]] = {name: [] for name in WATCHED}
    for _ in range(cycles):
        for name, workload in workloads.items():
            rounds[name].append(workload())
    return rounds


def _watch(args: argparse.Namespace) -> int:
    import numpy as np

    if args.one:  # the child: print its rounds as one JSON line
        print(json.dumps(_watch_one(args.cycles)))
        return 0
    runs = []
    for _ in range(args.processes):
        proc = subprocess.run([sys.executable, __file__, "watch", "--one",
                               f"--cycles={args.cycles}"], cwd=REPO, capture_output=True,
                              text=True, check=True)
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    if args.json:
        Path(args.json).write_text(json.dumps(runs))
    block = 10
    for name in WATCHED:
        logs = [np.log(np.asarray(r[name])) for r in runs]
        x, c = logs[0], np.log(np.asarray(runs[0]["control"]))
        window = [np.median(x[max(0, i - 5):i + 6]) for i in range(len(x))]
        level = [np.median(c[max(0, i - 5):i + 6]) for i in range(len(c))]
        blocks = len(x) // block
        meds = np.array([np.median(x[i * block:(i + 1) * block]) for i in range(blocks)])
        ctl = np.array([np.median(c[i * block:(i + 1) * block]) for i in range(blocks)])
        line = (f"{name:10} median {np.exp(np.median(x)) * 1000:8.1f} ms; rounds spread "
                f"{np.std(x, ddof=1):5.1%}; rolling level over x{np.exp(np.ptp(window)):.2f}")
        if name != "control" and blocks > 2:
            line += (f", r={np.corrcoef(window, level)[0, 1]:.2f} with the control's; medians of "
                     f"{block} cycles spread {np.std(meds, ddof=1):5.1%}, "
                     f"{np.std(meds - ctl, ddof=1):5.1%} divided by the control's")
        if len(runs) > 1:
            line += f"; between processes {np.std([np.median(v) for v in logs], ddof=1):5.1%}"
        print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    spread = sub.add_parser("spread", help="run the suite in fresh processes")
    spread.add_argument("out")
    spread.add_argument("--processes", type=int, default=4)
    spread.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    spread.add_argument("--taskset", metavar="CPUS", help="pin every process to these CPUs")
    spread.add_argument("pytest_args", nargs="*")
    spread.set_defaults(func=_spread)
    table = sub.add_parser("table", help="between- against within-process spread")
    table.add_argument("out", nargs="+")
    table.set_defaults(func=_table)
    runs = sub.add_parser("runs", help="between-run spread of saved runs of one code")
    runs.add_argument("run", nargs="+", metavar="RUN.json")
    runs.set_defaults(func=_runs)
    watch = sub.add_parser("watch", help="the host's speed against the process's, over time")
    watch.add_argument("--cycles", type=int, default=150)
    watch.add_argument("--processes", type=int, default=1)
    watch.add_argument("--json", metavar="FILE", help="also write every round here")
    watch.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    watch.set_defaults(func=_watch)
    # What follows `--` is pytest's, split off by hand: argparse gives an optional positional
    # (`nargs="*"`) its empty match at the first positional and then refuses the rest.
    argv = list(sys.argv[1:] if argv is None else argv)
    rest = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    args = parser.parse_args(argv)
    if rest:
        if args.command != "spread":
            parser.error("only `spread` passes arguments after `--` to pytest")
        args.pytest_args = [*args.pytest_args, *rest]
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
