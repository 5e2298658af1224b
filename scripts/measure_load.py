"""Measure `llmbench load`'s open loop as issue 44 asks, with the commands a user runs:
`llmbench serve` started as its own process, `llmbench load` against it.

  python scripts/measure_load.py repeat OUT      # tiny: one seeded schedule twice
  python scripts/measure_load.py lag OUT         # tiny, 1 token: the client's lag by rate
  python scripts/measure_load.py workers OUT     # the same, one client process against two
  python scripts/measure_load.py knee OUT        # smollm2: a rate sweep, then --find-capacity

OUT is a folder (made, must not exist) for the JSON, records and plots; figures go to
stdout, one line each, for docs/measurements/. Run it with nothing else on the machine.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serving(model: str, *extra: str):
    port = _free_port()
    server = subprocess.Popen(["llmbench", "serve", "--model", model, "--port", str(port),
                               *extra], stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        server.wait(30)


def load(url: str, model: str, out: Path, name: str, *flags: str) -> tuple[int, dict, float]:
    """One `llmbench load`: its exit code, its JSON and its wall time."""
    start = time.monotonic()
    code = subprocess.run(["llmbench", "load", "--url", url, "--model", model,
                           "--output", str(out / f"{name}.json"), *flags]).returncode
    return code, json.loads((out / f"{name}.json").read_text()), time.monotonic() - start


def repeat(out: Path) -> None:
    flags = ["--rate", "4", "--seed", "11", "--requests", "60", "--max-new-tokens", "8",
             "--fixed-length"]
    with serving("tiny") as url:
        runs = [load(url, "tiny", out, f"repeat{i}", *flags,
                     "--records", str(out / f"repeat{i}.jsonl")) for i in (1, 2)]
    records = [[json.loads(line) for line in (out / f"repeat{i}.jsonl").read_text()
                .splitlines()] for i in (1, 2)]
    same_offsets = all(a["scheduled_s"] == b["scheduled_s"] and a["index"] == b["index"]
                       for a, b in zip(*records, strict=True))
    same_inputs = all(a["input_tokens"] == b["input_tokens"]
                      for a, b in zip(*records, strict=True))
    sent_gap = max(abs(a["sent_s"] - b["sent_s"]) for a, b in zip(*records, strict=True))
    for code, document, wall in runs:
        lag = document["levels"][0]["summary"]["lag_ms"]
        print(f"repeat: exit {code}, {wall:.1f} s, lag p50 {lag['p50']:.2f} ms, p99 "
              f"{lag['p99']:.2f} ms, max {lag['max']:.2f} ms")
    print(f"repeat: {len(records[0])} requests; same scheduled offsets and order: "
          f"{same_offsets}; same prompts (input tokens): {same_inputs}; largest difference "
          f"in send time between the runs: {sent_gap * 1e3:.2f} ms")


def _lag_line(url: str, out: Path, rate: int, workers: int = 1) -> str:
    """One level of four seconds of one-token requests: the client's lag and what was
    served. The lag is reported, not judged (--max-lag 1000)."""
    code, document, wall = load(url, "tiny", out, f"lag{rate}-{workers}", "--rate", str(rate),
                                "--requests", str(rate * 4), "--max-new-tokens", "1",
                                "--max-lag", "1000", "--workers", str(workers))
    summary = document["levels"][0]["summary"]
    lag_ms = summary["lag_ms"]
    return (f"rate {rate} req/s, {workers} worker(s) ({summary['num_requests']} requests, "
            f"offered {summary['offered_rate']:.1f}): lag p50 {lag_ms['p50']:.2f} ms, p99 "
            f"{lag_ms['p99']:.2f} ms, max {lag_ms['max']:.2f} ms; served "
            f"{summary['request_throughput']:.1f} req/s; {wall:.1f} s in all; exit {code}")


def lag(out: Path) -> None:
    with serving("tiny", "--max-batch-size", "64") as url:
        for rate in (25, 50, 100, 200, 400):
            print(f"lag: {_lag_line(url, out, rate)}")


def workers(out: Path) -> None:
    with serving("tiny", "--max-batch-size", "64") as url:
        for rate in (100, 200):
            for count in (1, 2):
                print(f"workers: {_lag_line(url, out, rate, count)}")


def knee(out: Path) -> None:
    common = ["--max-new-tokens", "16", "--fixed-length", "--slo", "ttft=2000,itl=250",
              "--slo-percentile", "90", "--warmup", "4"]
    with serving("smollm2-135m", "--threads", "2") as url:
        code, document, wall = load(url, "smollm2-135m", out, "sweep", *common,
                                    "--rate", "0.5,1,2,4,8", "--plot", str(out / "sweep.png"))
        for level in document["levels"]:
            s = level["summary"]
            print(f"knee: rate {s['rate']:g}: served {s['request_throughput']:.2f} req/s, "
                  f"TTFT p50/p99 {s['ttft_ms']['p50']:.0f}/{s['ttft_ms']['p99']:.0f} ms, "
                  f"TPOT p50/p99 {s['tpot_ms']['p50']:.0f}/{s['tpot_ms']['p99']:.0f} ms, "
                  f"objectives {s['objectives']['verdict']}, goodput "
                  f"{s['objectives']['goodput_request_rate']:.2f} req/s")
        print(f"knee: sweep exit {code}, {wall:.0f} s")
        code, document, wall = load(url, "smollm2-135m", out, "capacity", *common,
                                    "--find-capacity", "--capacity-budget", "8m",
                                    "--plot", str(out / "capacity.png"))
        print(f"knee: --find-capacity exit {code}, {wall:.0f} s: {document['capacity']}")


if __name__ == "__main__":
    what, folder = sys.argv[1], Path(sys.argv[2])
    folder.mkdir(parents=True)
    {"repeat": repeat, "lag": lag, "workers": workers, "knee": knee}[what](folder)
