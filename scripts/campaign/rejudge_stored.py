"""The stored screen of a campaign's runs, judged again under today's rule and the rules
before it.

    python scripts/campaign/rejudge_stored.py CLONE [FIRST [LAST]]

For each run in CLONE/campaign/ledger.tsv (from ledger index FIRST to LAST), its saved run
against the baseline it was judged against, with the history it had (the runs saved before
it in the same folder), under three rules: the machine's speed left in and the baseline run
alone; the machine's speed divided out (`gate.host_speed`); and today's, the baseline's
level read from every saved run of its code (`gate.code_level`). For each: the stored
stage's counts (regression, not confirmed, not slower, unchanged, inconclusive) and the
smallest regression it could call (median benchmark); then the benchmarks (by test) today's
screen found slower. No confirmation runs here: the pairs a run made are not re-made. One
markdown row per run.
"""

from __future__ import annotations

import collections
import contextlib
import sys
from pathlib import Path

from llmbench.gate import code_level, host_speed
from llmbench.gate.compare import screen_runs
from llmbench.gate.noise import estimate_noise
from llmbench.gate.options import GateOptions
from llmbench.runs.store import load_run

SHOWN = ("regression", "not confirmed", "not slower", "unchanged", "inconclusive")


def _speed_left_in(speed, history, normalize):
    """`host_speed.divide_out` as the rule stood before it: nothing divided out."""
    left = None if speed is None else host_speed.HostSpeed(speed.ratio, 0.0, "left in")
    return left, estimate_noise(history)


@contextlib.contextmanager
def _rule(divide: bool, level: bool):
    saved = host_speed.divide_out, code_level.code_levels
    if not divide:
        host_speed.divide_out = _speed_left_in
    if not level:
        code_level.code_levels = lambda *args, **kwargs: {}
    try:
        yield
    finally:
        host_speed.divide_out, code_level.code_levels = saved


def _summary(result) -> str:
    counts = collections.Counter(str(c.verdict) for c in result.comparisons)
    smallest = sorted(b.smallest_regression for b in result.between.values())
    reach = f" (x{smallest[len(smallest) // 2]:.3f})" if smallest else ""
    return " / ".join(str(counts[v]) for v in SHOWN) + reach


def main(clone: Path, first: int, last: int) -> None:
    rows = [line.rstrip("\n").split("\t") for line in
            (clone / "campaign" / "ledger.tsv").read_text().splitlines() if line.strip()]
    print(f"| run | kind | machine left in: {' / '.join(SHOWN)} (calls from) | divided out "
          "(power) | against the code's level (runs) | slower today |")
    print("|:--|:--|:--|:--|:--|:--|")
    for idx, kind, _start, saved, _rc, _wall, against in rows:
        if not first <= int(idx) <= last or not saved or not against:
            continue
        candidate, baseline = load_run(clone / saved), load_run(clone / against)
        folder = (clone / saved).parent
        history = [load_run(p) for p in sorted(folder.glob("[0-9][0-9][0-9][0-9]_*.json"))
                   if p.name < (clone / saved).name]
        judged = {}
        for name, divide, level in (("raw", False, False), ("divided", True, False),
                                    ("level", True, True)):
            with _rule(divide, level):
                judged[name] = screen_runs(baseline, candidate, GateOptions(), history)
        today = judged["level"]
        slower = sorted({c.name.split("::")[-1].split("[")[0] for c in today.comparisons
                         if str(c.verdict) in ("regression", "not confirmed")})
        power = judged["divided"].host.slope if judged["divided"].host is not None else 0.0
        runs = max((b.level_runs for b in today.between.values()), default=1)
        print(f"| {idx} | {kind} | {_summary(judged['raw'])} | {_summary(judged['divided'])} "
              f"({power:.2f}) | {_summary(today)} ({runs}) | {', '.join(slower) or '-'} |")


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    main(Path(args[0]), int(args[1]) if len(args) > 1 else 1,
         int(args[2]) if len(args) > 2 else 10 ** 9)
