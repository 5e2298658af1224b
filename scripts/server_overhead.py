"""The server's inter-token latency against the engine's decode, side by side: for each
engine configuration, start `llmbench serve` with it, load the same configuration here, and
alternate ROUNDS times between the engine alone (our loop, one request) and streamed
requests at concurrency 1 through the server (native and OpenAI routes, with
`llmbench load`'s client). Optionally the same client against another server (llama.cpp's
`llama-server`) serving the GGUF file the default model comes from. Prints a markdown table.

    python scripts/server_overhead.py --rounds 3 \\
        --config "" --config "--dtype bfloat16 --weights int4 --cache static --compile" \\
        --llama-server /path/to/llama-server
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import torch

from llmbench.cli import build_parser
from llmbench.cli.args import engine_config
from llmbench.engine.config import SamplingParams
from llmbench.engine.loop import generate
from llmbench.engine.models import load_model
from llmbench.engine.prompts import encode, questions
from llmbench.load.client import run_load
from llmbench.load.config import LoadConfig


def wait_healthy(url: str, proc: subprocess.Popen, limit_s: float = 900) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode} before it was healthy")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit(f"{url} was not healthy within {limit_s} s")


def load_itl(url: str, api: str, params: SamplingParams, tokenizer, requests: int,
             model: str | None) -> tuple[float, float | None]:
    """(ITL p50 ms, the server's own decode p50 ms or None) of one concurrency-1 level."""
    config = LoadConfig(url=url, api=api, concurrency=1, num_requests=requests, model=model)
    result = run_load(config, params, tokenizer, list(questions()[:requests]))
    if result.num_errors:
        raise SystemExit(f"{url} ({api}): {result.summary()['errors']}")
    summary = result.summary()
    decode = summary["server_decode_ms"]
    return summary["itl_ms"]["p50"], decode["p50"] if decode else None


def measure_config(flags: str, args, params: SamplingParams) -> dict:
    parsed = build_parser().parse_args(["serve", *shlex.split(flags)])
    lm = load_model(engine_config(parsed))
    prompt = encode(lm.tokenizer, questions()[0], chat=lm.is_chat)
    with torch.inference_mode():
        generate(lm, prompt, params)  # compile (if asked) and warm, untimed
    url = f"http://127.0.0.1:{args.port}"
    # The configuration's own --max-batch-size, if it has one, comes last and wins.
    proc = subprocess.Popen([sys.executable, "-m", "llmbench", "serve", "--max-batch-size",
                             "8", "--port", str(args.port), *shlex.split(flags)],
                            stderr=subprocess.DEVNULL)
    rows: dict[str, list[float]] = {"engine": [], "server": [], "native": [], "openai": []}
    try:
        wait_healthy(url, proc)
        for _ in range(args.rounds):
            with torch.inference_mode():
                steps = generate(lm, prompt, params).decode_times_s
            rows["engine"].append(1e3 * statistics.median(steps))  # a median, as the server's
            itl, server = load_itl(url, "native", params, lm.tokenizer, args.requests, None)
            rows["native"].append(itl)
            rows["server"].append(server)
            rows["openai"].append(load_itl(url, "openai", params, lm.tokenizer,
                                           args.requests, None)[0])
    finally:
        proc.terminate()
        proc.wait(30)
    return {k: statistics.median(v) for k, v in rows.items()}


def measure_llama_cpp(args, params: SamplingParams, tokenizer) -> float:
    from llmbench.engine.gguf import shipped_gguf_path

    url = f"http://127.0.0.1:{args.port + 1}"
    proc = subprocess.Popen([args.llama_server, "-m", str(shipped_gguf_path()), "-t",
                             str(args.threads), "-c", "2048", "--port", str(args.port + 1)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(url, proc, 120)
        load_itl(url, "openai", params, tokenizer, 2, "smollm2-135m")  # warm
        return statistics.median(load_itl(url, "openai", params, tokenizer, args.requests,
                                          "smollm2-135m")[0] for _ in range(args.rounds))
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", default=None,
                        help="`llmbench serve` flags (engine options, --max-batch-size, "
                             "--max-context); repeatable. Default: none")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=4, help="per level and round")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--port", type=int, default=8431)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--llama-server", type=Path, default=None)
    args = parser.parse_args()
    params = SamplingParams(max_new_tokens=args.max_new_tokens, ignore_eos=True)
    print("| configuration | engine decode (ms/token) | server's own decode (ms/token) | "
          "ITL p50, native (ms) | ITL p50, OpenAI (ms) | native ITL / engine | "
          "OpenAI ITL / engine |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    engine_best = None
    for flags in args.config or [""]:
        m = measure_config(flags, args, params)
        print(f"| `{flags or '(defaults)'}` | {m['engine']:.1f} | {m['server']:.1f} | "
              f"{m['native']:.1f} | {m['openai']:.1f} | {m['native'] / m['engine']:.2f} | "
              f"{m['openai'] / m['engine']:.2f} |", flush=True)
        if engine_best is None or m["openai"] < engine_best[1]:
            engine_best = (flags, m["openai"])
    if args.llama_server:
        from llmbench.engine.models import load_tokenizer

        itl = measure_llama_cpp(args, params, load_tokenizer("smollm2-135m"))
        print(f"\nllama.cpp's llama-server ({args.threads} threads), OpenAI route, ITL p50: "
              f"{itl:.1f} ms; llmbench serve `{engine_best[0] or '(defaults)'}`: "
              f"{engine_best[1]:.1f} ms, {engine_best[1] / itl:.2f}x llama.cpp's")


if __name__ == "__main__":
    main()
