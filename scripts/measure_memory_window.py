"""Measure how far a case's memory figure moves between processes of the same code.

  python scripts/measure_memory_window.py aa N OUT     # N paired A/As of HEAD, tiny model
  python scripts/measure_memory_window.py runs RUN.json RUN.json ...   # stored runs

`aa` runs `llmbench ab HEAD` N times on the tiny model's prefill and decode cases (the
paired A/A the tests run at the real threshold) from this checkout, keeping each side's
run under OUT/N; `runs` reads saved runs of one commit. Both print each case's
`peak_memory_added_bytes` per process and the largest spread between processes, for
docs/measurements/. Run it with nothing else on the machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIGURE = "peak_memory_added_bytes"
TINY = ["--model", "tiny", "--threads", "1", "--warmup-rounds", "1", "-k", "decode or prefill"]
MIB = 2 ** 20


def figures(run: Path) -> dict[str, int]:
    """Each case's figure in one saved run."""
    data = json.loads(run.read_text("utf-8"))
    return {b["name"]: b["extra_info"][FIGURE] for b in data["benchmarks"]
            if isinstance(b["extra_info"].get(FIGURE), int)}


def show(runs: list[Path]) -> None:
    by_case: dict[str, list[int]] = {}
    for run in runs:
        for name, value in figures(run).items():
            by_case.setdefault(name, []).append(value)
    for name, values in sorted(by_case.items()):
        print(f"{name}: " + ", ".join(f"{v / MIB:.1f}" for v in values) + " MiB")
    spreads = sorted((max(v) - min(v), name) for name, v in by_case.items())
    worst, name = spreads[-1]
    print(f"{len(runs)} processes, {len(by_case)} cases: largest figure "
          f"{max(max(v) for v in by_case.values()) / MIB:.1f} MiB, largest spread "
          f"{worst / MIB:.1f} MiB ({name})")


def paired_aa(count: int, out: Path) -> None:
    out.mkdir(parents=True)
    for i in range(1, count + 1):
        keep = out / str(i)
        proc = subprocess.run([sys.executable, "-m", "llmbench", "ab", "HEAD", "--budget",
                               "240s", "--keep", str(keep), "--", *TINY], cwd=REPO,
                              capture_output=True, text=True)
        said = (proc.stdout.strip() or proc.stderr.strip() or "(nothing)").splitlines()[-1]
        print(f"A/A {i}: exit {proc.returncode}: {said}")
    show(sorted(out.glob("*/*/*/*.json")))


def main(argv: list[str]) -> None:
    if len(argv) == 3 and argv[0] == "aa":
        paired_aa(int(argv[1]), Path(argv[2]))
    elif len(argv) >= 2 and argv[0] == "runs":
        show([Path(p) for p in argv[1:]])
    else:
        sys.exit(__doc__.strip().splitlines()[0] + "\nusage: see the module docstring")


if __name__ == "__main__":
    main(sys.argv[1:])
