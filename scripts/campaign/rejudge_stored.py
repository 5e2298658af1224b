"""The stored screen of a campaign's runs, judged again under today's rule.

    python scripts/campaign/rejudge_stored.py CLONE [FIRST [LAST]]

For each run in CLONE/campaign/ledger.tsv (from ledger index FIRST to LAST), its saved run
against the baseline it was judged against, with the history it had (the runs saved before
it in the same folder): the stored stage's counts (regression, not confirmed, not slower,
unchanged, inconclusive) with the machine's speed left in, and as `gate.host_speed` divides
it out, and the benchmarks (by test) the divided screen found slower. No confirmation runs
here: the pairs a run made are not re-made. One markdown row per run.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

from llmbench.gate import host_speed
from llmbench.gate.compare import screen_runs
from llmbench.gate.noise import estimate_noise
from llmbench.gate.options import GateOptions
from llmbench.runs.store import load_run

SHOWN = ("regression", "not confirmed", "not slower", "unchanged", "inconclusive")


def _speed_left_in(speed, history, normalize):
    """`host_speed.divide_out` as the rule stood before it: nothing divided out."""
    left = None if speed is None else host_speed.HostSpeed(speed.ratio, 0.0, "left in")
    return left, estimate_noise(history)


def _counts(result) -> str:
    counts = collections.Counter(str(c.verdict) for c in result.comparisons)
    return " / ".join(str(counts[v]) for v in SHOWN)


def main(clone: Path, first: int, last: int) -> None:
    rows = [line.rstrip("\n").split("\t") for line in
            (clone / "campaign" / "ledger.tsv").read_text().splitlines() if line.strip()]
    print(f"| run | kind | machine left in: {' / '.join(SHOWN)} | divided out (power): "
          f"same counts | slower in the divided screen |")
    print("|:--|:--|:--|:--|:--|")
    divide = host_speed.divide_out
    for idx, kind, _start, saved, _rc, _wall, against in rows:
        if not first <= int(idx) <= last or not saved or not against:
            continue
        candidate, baseline = load_run(clone / saved), load_run(clone / against)
        folder = (clone / saved).parent
        history = [load_run(p) for p in sorted(folder.glob("[0-9][0-9][0-9][0-9]_*.json"))
                   if p.name < (clone / saved).name]
        host_speed.divide_out = _speed_left_in
        raw = screen_runs(baseline, candidate, GateOptions(), history)
        host_speed.divide_out = divide
        divided = screen_runs(baseline, candidate, GateOptions(), history)
        slower = sorted({c.name.split("::")[-1].split("[")[0] for c in divided.comparisons
                         if str(c.verdict) in ("regression", "not confirmed")})
        power = divided.host.slope if divided.host is not None else 0.0
        print(f"| {idx} | {kind} | {_counts(raw)} | {_counts(divided)} ({power:.2f}) | "
              f"{', '.join(slower) or '-'} |")


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    main(Path(args[0]), int(args[1]) if len(args) > 1 else 1,
         int(args[2]) if len(args) > 2 else 10 ** 9)
