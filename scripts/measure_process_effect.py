"""How far two processes of the same code disagree: a paired A/A of process pairs.

Each process pair is two fresh processes pinned to one CPU, each loading the model once and
warming it, then timing rounds in turn (A B, then B A) as `llmbench ab` does. Under the same
code the pairs' ratio B/A should be 1 up to round noise; a ratio that stays away from 1 for
the life of a pair, and moves between pairs, is a per-process effect, drawn when a process
starts, that no pairing of rounds within one process pair can cancel.

    python scripts/measure_process_effect.py --process-pairs 10
    python scripts/measure_process_effect.py --process-pairs 10 --env THP_MEM_ALLOC_ENABLE=0

A round is `--steps` greedy decode steps on a cache holding `--context` tokens (the suite's
decode case), or with `--case prefill` the prefill of `--context` tokens. Measure alone.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time

import llmbench  # noqa: F401  (first: on import it asks for huge pages, before torch allocates)


def child(model: str, case: str, context: int, steps: int) -> None:
    """One side: load, warm, then time one round per line read from stdin."""
    import torch

    from llmbench.engine.config import EngineConfig
    from llmbench.engine.loop import decode_step, prefill, request_cache
    from llmbench.engine.models import load_model

    lm = load_model(EngineConfig(model=model, device="cpu", threads=1))
    ids = torch.tensor([list(range(100, 100 + context))])

    @torch.inference_mode()
    def round_s() -> float:
        if case == "prefill":
            start = time.perf_counter()
            logits, _ = prefill(lm, ids, cache=request_cache(lm, context))
            logits.argmax(dim=-1)
            return time.perf_counter() - start
        logits, cache = prefill(lm, ids, cache=request_cache(lm, context + steps))
        token = logits.argmax(dim=-1, keepdim=True)
        start = time.perf_counter()
        for _ in range(steps):
            logits, cache = decode_step(lm, token, cache)
            token = logits.argmax(dim=-1, keepdim=True)
        return time.perf_counter() - start

    for _ in range(3):
        round_s()
    print("ready", flush=True)
    for _ in sys.stdin:
        print(round_s(), flush=True)


def process_pair_ratio(args: argparse.Namespace, env: dict[str, str]) -> list[float]:
    """One process pair's log-ratios ln(B) - ln(A), one per pair of rounds."""
    command = ["taskset", "-c", str(args.cpu), sys.executable, __file__, "--child",
               "--model", args.model, "--case", args.case, "--context", str(args.context),
               "--steps", str(args.steps)]
    sides = [subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                              text=True) for _ in "AB"]
    try:
        for side in sides:
            if side.stdout.readline().strip() != "ready":
                raise SystemExit("a side failed to start: see its error above")

        def one(side: subprocess.Popen) -> float:
            side.stdin.write("go\n")
            side.stdin.flush()
            return float(side.stdout.readline())

        d = []
        for i in range(args.pairs):
            order = (0, 1) if i % 2 == 0 else (1, 0)
            seconds = {j: one(sides[j]) for j in order}
            d.append(math.log(seconds[1] / seconds[0]))
        return d
    finally:
        for side in sides:
            side.stdin.close()
            side.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--case", choices=("decode", "prefill"), default="decode")
    parser.add_argument("--context", type=int, default=16)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--process-pairs", type=int, default=8)
    parser.add_argument("--pairs", type=int, default=40, help="pairs of rounds per process pair")
    parser.add_argument("--cpu", type=int, default=os.cpu_count() - 1)
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="set in both sides' environment (repeatable)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.model, args.case, args.context, args.steps)
        return
    env = dict(os.environ)
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--env {item!r}: expected NAME=VALUE")
        env[name] = value
    centres = []
    for k in range(args.process_pairs):
        d = sorted(process_pair_ratio(args, env))
        centres.append(statistics.median(d))
        q1, q3 = d[len(d) // 4], d[3 * len(d) // 4]
        print(f"process pair {k}: B/A x{math.exp(centres[-1]):.3f} "
              f"(rounds' quartiles x{math.exp(q1):.3f} to x{math.exp(q3):.3f})", flush=True)
    print(f"{args.case} on {args.model}, {args.process_pairs} process pairs: B/A from "
          f"x{math.exp(min(centres)):.3f} to x{math.exp(max(centres)):.3f}, "
          f"sd of ln ratio {statistics.stdev(centres):.3f}" if len(centres) > 1 else "")


if __name__ == "__main__":
    main()
