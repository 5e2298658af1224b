"""The dashboard's pictures: a benchmark's history and its counted work as SVG files drawn by
matplotlib (headless, object API), and the index's trend lines as tiny inline SVG polylines
(forty of them per environment: a figure each would dominate the build for a 60-pixel line).
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.figure import Figure

from llmbench import runs
from llmbench.dashboard.collect import Across, Benchmark
from llmbench.history.plot import DENSE_POINTS, draw_panel
from llmbench.history.series import run_label
from llmbench.runs.location import moment

SPARK_WIDTH, SPARK_HEIGHT = 120, 28


def sparkline(medians: list[float], *, injected: list[bool] | None = None,
              shifts: list[int] = ()) -> str:
    """An inline SVG trend of `medians` (seconds, oldest first), log-scaled so that equal
    ratios look equal; the newest point dotted, injected runs in red, and a change point
    (the index of the first run of a new level) as an orange tick before it."""
    if not medians:
        return ""
    logs = [math.log(m) for m in medians]
    low, high = min(logs), max(logs)
    span = (high - low) or 1.0
    n = len(logs)

    def xy(i: int) -> tuple[float, float]:
        x = 2 + (SPARK_WIDTH - 4) * (i / (n - 1) if n > 1 else 0.5)
        y = SPARK_HEIGHT - 3 - (SPARK_HEIGHT - 6) * ((logs[i] - low) / span)
        return round(x, 1), round(y, 1)

    points = " ".join(f"{x},{y}" for x, y in map(xy, range(n)))
    dots = "".join(f'<circle cx="{x}" cy="{y}" r="2" fill="#d62728"/>'
                   for i, (x, y) in enumerate(map(xy, range(n))) if injected and injected[i])
    ticks = "".join(
        f'<line class="shift" x1="{(xy(i - 1)[0] + xy(i)[0]) / 2:.1f}" y1="0" '
        f'x2="{(xy(i - 1)[0] + xy(i)[0]) / 2:.1f}" y2="{SPARK_HEIGHT}" stroke="#ff7f0e" '
        'stroke-dasharray="2,2"/>' for i in shifts if 0 < i < n)
    x, y = xy(n - 1)
    label = html.escape(f"{n} runs, from {medians[0] * 1e3:.3g} to {medians[-1] * 1e3:.3g} ms")
    return (f'<svg class="spark" width="{SPARK_WIDTH}" height="{SPARK_HEIGHT}" role="img" '
            f'aria-label="{label}"><polyline fill="none" stroke="#1f77b4" stroke-width="1.2" '
            f'points="{points}"/>{ticks}{dots}'
            f'<circle cx="{x}" cy="{y}" r="2.5" fill="#1f77b4"/></svg>')


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasSVG(fig).print_svg(str(path))
    return path


def history_figure(bench: Benchmark, path: Path) -> Path:
    """The benchmark's series over runs: each run's median and quartiles, the change points
    and the newest level's band (the panel `llmbench history` draws), as SVG."""
    fig = Figure(figsize=(9, 4.2), layout="constrained")
    ax = fig.add_subplot()
    if bench.judged is not None:
        draw_panel(ax, bench.judged)
    else:  # too few runs for change points: the series alone
        points = bench.series.points
        xs = list(range(len(points)))
        mids = [p.median_s * 1e3 for p in points]
        below = [m - p.low_s * 1e3 for m, p in zip(mids, points, strict=True)]
        above = [p.high_s * 1e3 - m for m, p in zip(mids, points, strict=True)]
        ax.errorbar(xs, mids, yerr=[below, above],
                    color="tab:gray", marker="o", markersize=4, capsize=2, linewidth=1)
        ax.set_xticks(xs, [run_label(p) for p in points], fontsize=7, rotation=60,
                      ha="right", rotation_mode="anchor", parse_math=False)
        ax.set_ylabel("median (ms)")
        ax.set_title(bench.name, fontsize=9, parse_math=False)  # names may hold `$`
    return _save(fig, path)


def across_figure(across: Across, path: Path) -> Path:
    """One benchmark's medians on each kind of machine over time (log scale: equal ratios
    look equal), a line per environment and testbed; runs without a date at the end."""
    fig = Figure(figsize=(9, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for line in across.lines:
        # Aware moments, one rule for every run: a naive stamp beside an aware one would
        # stop matplotlib from placing both on one axis.
        whens = [moment(when) for when, _ in line.points]
        dated = [(w, m) for w, (_, m) in zip(whens, line.points, strict=True) if w is not None]
        if not dated:
            continue
        ax.plot([w for w, _ in dated], [m * 1e3 for _, m in dated],
                marker=None if len(dated) > DENSE_POINTS else "o", markersize=3,
                linewidth=1.2, label=f"{line.environment} | {line.testbed}")
    ax.set_yscale("log")
    ax.set_ylabel("median (ms, log scale)")
    ax.legend(fontsize=7, loc="upper left")  # "best" tests every point of every line
    ax.set_title(across.name, fontsize=9, parse_math=False)
    fig.autofmt_xdate()
    return _save(fig, path)


def work_figure(bench: Benchmark, path: Path) -> Path | None:
    """Counted work per run, each size relative to the first run that counted it: a step here
    explains a step in time. None when no run counted this benchmark's work."""
    counted = [(p, bench.work.get(p.run)) for p in bench.series.points]
    counted = [(p, w) for p, w in counted if w is not None and w.sizes]
    if not counted:
        return None
    fig = Figure(figsize=(9, 2.6), layout="constrained")
    ax = fig.add_subplot()
    xs = [i for i, p in enumerate(bench.series.points) if bench.work.get(p.run)
          and bench.work[p.run].sizes]
    dense = len(xs) > DENSE_POINTS
    for k, (shown, first) in enumerate(counted[0][1].sizes):
        values = [dict(w.sizes)[shown] / first if first else 1.0 for _, w in counted]
        ax.step(xs, values, where="mid", marker=None if dense else "o", markersize=3,
                linewidth=1.2,
                label=f"{shown} (first: {first:,})", color=("tab:blue", "tab:orange",
                                                           "tab:green")[k % 3])
    ax.set_ylabel("x first run")
    ax.set_xlim(-0.5, len(bench.series.points) - 0.5)
    ax.set_xticks([])
    ax.legend(fontsize=7, loc="upper left" if dense else "best")
    ax.set_title("counted work per run", fontsize=9)
    return _save(fig, path)


def pair_ratios(baseline: runs.Run, candidate: runs.Run,
                keys: list[str]) -> list[tuple[str, list[float]]]:
    """Each paired benchmark's pairs as candidate/baseline ratios, by key (round i of one
    side paired with round i of the other), named as a reader knows it."""
    out = []
    for key in keys:
        b, c = baseline.benchmarks.get(key), candidate.benchmarks.get(key)
        if b is None or c is None:
            continue
        pairs = zip(b.samples, c.samples, strict=False)  # a side may hold an unpaired round
        out.append((b.name, [cs / bs for bs, cs in pairs if bs > 0 and cs > 0]))
    return out


def pairs_figure(ratios: list[tuple[str, list[float]]], path: Path) -> Path:
    """Each benchmark's pairs as points on a log axis around 1 (no change)."""
    fig = Figure(figsize=(9, 0.45 * len(ratios) + 1.2), layout="constrained")
    ax = fig.add_subplot()
    for row, (_, values) in enumerate(ratios):
        # A fixed, evenly spread jitter: the same pairs always draw the same picture.
        jitter = [row + 0.25 * math.sin(i * 2.39996) for i in range(len(values))]
        ax.scatter(values, jitter, s=9, alpha=0.55, color="tab:blue")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks(range(len(ratios)), [name for name, _ in ratios], fontsize=7,
                  parse_math=False)
    ax.invert_yaxis()
    ax.set_xlabel("candidate / baseline, one point per pair of rounds (log scale)")
    return _save(fig, path)
