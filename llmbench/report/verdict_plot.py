"""The verdict at a glance: a forest plot of every benchmark's ratio and its CI, `verdicts.png`.

One row per benchmark, sorted by group: the ratio (candidate / baseline, log scale, > 1 is
slower) with its confidence interval, against the shaded band of its threshold, where
"unchanged" lives; each row is coloured by its verdict. A regression is a row whose whole
interval lies right of the band. Drawn for `llmbench report --baseline` (first in report.md)
and for `llmbench ab --keep DIR`.
"""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from llmbench.gate import GateResult
from llmbench.gate.stats import Verdict

FILE = "verdicts.png"
DPI = 120
COLORS = {Verdict.REGRESSION: "tab:red", Verdict.IMPROVEMENT: "tab:green",
          Verdict.UNCHANGED: "tab:blue", Verdict.INCONCLUSIVE: "tab:gray",
          Verdict.NOT_SLOWER: "tab:cyan",
          Verdict.NOT_CONFIRMED: "tab:orange"}
TICKS = (0.25, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 4.0)
_OPEN_END = 4.0  # how far an unbounded interval is drawn, as a factor beyond the ratio


def _finite(value: float, ratio: float, side: int) -> float:
    return value if 0 < value < math.inf else ratio * _OPEN_END ** side


def draw_verdicts(result: GateResult, path: Path) -> Path:
    """Draw the forest plot of `result` to `path`."""
    rows = sorted(result.comparisons, key=lambda c: (c.group or "", result.labels[c.name]))
    fig = Figure(figsize=(9.0, 1.2 + 0.38 * len(rows)), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for y, c in enumerate(reversed(rows)):
        color = COLORS[c.verdict]
        ax.fill_betweenx([y - 0.4, y + 0.4], 1 / (1 + c.threshold), 1 + c.threshold,
                         color="tab:blue", alpha=0.08, linewidth=0)
        low, high = _finite(c.ci_low, c.ratio, -1), _finite(c.ci_high, c.ratio, 1)
        ax.plot([low, high], [y, y], color=color, linewidth=2.2, solid_capstyle="butt")
        ax.plot([c.ratio], [y], marker="o", color=color, markersize=6)
        ax.annotate(c.verdict.value, (1.0, y), xycoords=("axes fraction", "data"),
                    xytext=(6, 0), textcoords="offset points", va="center", fontsize=8,
                    color=color)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(rows)),
                  [f"{c.group or '-'}: {result.labels[c.name]}" for c in reversed(rows)],
                  fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(TICKS))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    unit = next((c.unit for c in rows), "rounds")
    ax.set_xlabel(f"candidate / baseline (> 1 is slower): the ratio and its CI, judged on "
                  f"{unit}\nshaded: within the threshold, where 'unchanged' lives")
    ax.set_title(f"Verdicts: {result.candidate.title}", fontsize=10)
    fig.savefig(path, dpi=DPI)
    return path
