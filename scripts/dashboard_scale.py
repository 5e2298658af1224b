"""How long `llmbench dashboard` takes on a large history: writes RUNS synthetic runs of
BENCHMARKS benchmarks each (seeded; a 30% step in half of them at 60% of the runs), builds the
site from them, and prints the build's wall time and the site's size.

    python scripts/dashboard_scale.py --runs 200 --benchmarks 40 --out /tmp/dashboard-scale
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from gate_runs import make_run, write_run  # noqa: E402 - the tests' synthetic runs

from llmbench.dashboard import build_site  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--benchmarks", type=int, default=40)
    parser.add_argument("--out", type=Path, required=True, help="a new folder")
    args = parser.parse_args()
    names = {f"test_case[i={i}]": "decode" if i % 2 else "prefill"
             for i in range(args.benchmarks)}
    folder = args.out / "baselines" / "tiny-cpu-float32"
    rng = np.random.default_rng(1)
    for i in range(1, args.runs + 1):
        step = 1.3 if i > 0.6 * args.runs else 1.0
        run = make_run(i, benchmarks=names,
                       factors={"decode": step * float(np.exp(rng.normal(0, 0.03)))})
        for bench in run["benchmarks"]:
            bench["extra_info"]["work"] = {"num_ops": 1000, "flops": 5_000_000,
                                           "bytes_read": 2048, "bytes_written": 512}
        write_run(folder / f"{i:04d}_run.json", run)
    started = time.perf_counter()
    build_site(args.out / "baselines", args.out / "site")
    took = time.perf_counter() - started
    size = sum(p.stat().st_size for p in (args.out / "site").rglob("*") if p.is_file())
    print(f"{args.runs} runs x {args.benchmarks} benchmarks: built in {took:.1f} s, "
          f"{size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
