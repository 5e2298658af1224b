"""Trend plots of a judged history: one PNG per group, `history_<group>.png`.

One panel per benchmark: each run's median with its rounds' quartiles against the run
(numbered, with its commit), the change points as dashed lines with their ratio, the newest
level's threshold band shaded, and the newest run coloured by its verdict. Drawn on
matplotlib's object API (headless, no global state), as the report's plots are.
"""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from llmbench.gate.stats import Verdict
from llmbench.history.judge import HistoryResult, SeriesResult
from llmbench.history.series import run_label

DPI = 120
ALL_BENCHMARKS_FILE = "history_all_benchmarks.png"
VERDICT_COLORS = {Verdict.REGRESSION: "tab:red", Verdict.IMPROVEMENT: "tab:green",
                  Verdict.UNCHANGED: "tab:blue"}


def plot_files(result: HistoryResult) -> dict[str, list[SeriesResult]]:
    """The file each group's plot goes to, with its series, in the history's order."""
    files: dict[str, list[SeriesResult]] = {}
    for r in result.results:
        files.setdefault(f"history_{r.series.group or 'ungrouped'}.png", []).append(r)
    return files


def file_names(result: HistoryResult) -> list[str]:
    """Every file `draw_history` writes for this result."""
    return [*plot_files(result), *([ALL_BENCHMARKS_FILE] if result.machine else [])]


# Beyond this many runs a panel draws lines without a marker per run.
DENSE_POINTS = 120


def draw_panel(ax, r: SeriesResult, relative: bool = False) -> None:
    """One benchmark's history on `ax` (the dashboard draws the same panel on its pages)."""
    points = r.series.points
    scale, unit = (1e3, "ms") if max(p.median_s for p in points) < 1 else (1.0, "s")
    if relative:  # all benchmarks together: levels, not seconds
        scale, unit = 1.0, "x the history's median"
    xs = list(range(len(points)))
    mids = [p.median_s * scale for p in points]
    # Hundreds of runs: a marker and caps per run would only blot the line, and cost most
    # of a dashboard's build (every marker is drawn, and "best" legend placement tests
    # every point).
    dense = len(points) > DENSE_POINTS
    ax.errorbar(xs, mids, yerr=[[m - p.low_s * scale for m, p in zip(mids, points, strict=True)],
                                [p.high_s * scale - m for m, p in zip(mids, points, strict=True)]],
                color="tab:gray", marker=None if dense else "o", markersize=4,
                capsize=0 if dense else 2, linewidth=1,
                label="each run's median" if r.beta else None)
    # What the change points and the verdict were found on: the medians without the share
    # of each run's move that the benchmark had in common with the others.
    judged = mids
    if r.beta and len(r.moves) == len(mids):
        judged = [m * math.exp(-move) for m, move in zip(mids, r.moves, strict=True)]
        ax.plot(xs, judged, color="tab:blue", marker=None if dense else ".", markersize=5,
                linewidth=1.2,
                label=f"without the {'control' if relative else 'machine'}'s share "
                      f"(beta {r.beta:.2f})")
    start = r.level_start()
    level = judged[start:-1]
    if level:  # the newest level, and the band a regression must leave
        mean = math.exp(sum(math.log(v) for v in level) / len(level))
        ax.fill_between([start - 0.3, len(points) - 0.7], mean / (1 + r.threshold),
                        mean * (1 + r.threshold), color="tab:blue", alpha=0.1, linewidth=0,
                        label=f"newest level ±{r.threshold:.0%}")
        ax.hlines(mean, start, len(points) - 1, color="tab:blue", linewidth=1, alpha=0.6)
    for shift in r.shifts:
        ax.axvline(shift.index - 0.5, color="tab:orange", linestyle="--", linewidth=1.2)
        ax.annotate(f"x{shift.ratio:.2f}", (shift.index - 0.5, 1.0), xycoords=("data",
                    "axes fraction"), xytext=(3, -12), textcoords="offset points",
                    color="tab:orange", fontsize=8)
    color = VERDICT_COLORS.get(r.newest.verdict, "black")
    ax.plot([xs[-1]], [judged[-1]], marker="o", markersize=8, color=color, linestyle="none",
            label=f"newest: {r.newest.word}")
    labels = [run_label(p) for p in points]
    step = max(1, len(points) // 16)
    ax.set_xticks(xs[::step], labels[::step], fontsize=7, rotation=60, ha="right",
                  rotation_mode="anchor", parse_math=False)
    ax.set_xlabel("run and commit", fontsize=8)
    ax.set_title(r.series.name, fontsize=9, parse_math=False)  # names may hold `$`
    ax.set_ylabel(unit if relative else f"median ({unit})")
    ax.legend(fontsize=7, loc="upper left" if dense else "best")


def _control(ax, result: HistoryResult) -> None:
    """The control workload's level per run, on the all-benchmarks panel: where it moves
    with them, the machine moved."""
    by_run = dict(zip(result.history.runs, result.history.control_s, strict=False))
    points = result.machine.series.points
    xs = [i for i, p in enumerate(points) if by_run.get(p.run)]
    if not xs:
        return
    values = sorted(by_run[points[i].run] for i in xs)
    usual = values[len(values) // 2]
    ax.plot(xs, [by_run[points[i].run] / usual for i in xs], color="tab:green", marker="s",
            markersize=3, linewidth=0.8, alpha=0.7, label="control workload")
    ax.legend(fontsize=7, loc="best")


def draw_history(result: HistoryResult, out_dir: Path) -> list[Path]:
    """Write every group's plot into `out_dir` (which must exist); the paths written."""
    written = []
    for file, series in plot_files(result).items():
        cols = min(3, len(series))
        rows = math.ceil(len(series) / cols)
        fig = Figure(figsize=(4.6 * cols, 3.4 * rows + 0.6), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(rows, cols, squeeze=False).ravel()
        for ax, r in zip(axes, series, strict=False):
            draw_panel(ax, r)
        for ax in axes[len(series):]:
            ax.set_visible(False)
        fig.suptitle(f"History of {series[0].series.group or 'ungrouped'}: "
                     f"{result.history.title}, runs {result.history.runs[0]}-"
                     f"{result.history.newest}\nwhiskers: quartiles of each run's rounds; "
                     f"dashed: change points", fontsize=10)
        path = out_dir / file
        fig.savefig(path, dpi=DPI)
        written.append(path)
    if result.machine is not None:
        written.append(_draw_all_benchmarks(result, out_dir))
    return written


def _draw_all_benchmarks(result: HistoryResult, out_dir: Path) -> Path:
    fig = Figure(figsize=(7.0, 4.0), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    draw_panel(ax, result.machine, relative=True)
    _control(ax, result)
    fig.suptitle(f"All benchmarks together: {result.history.title}\nthe median of the "
                 f"benchmarks' levels, each against its own history;\ngreen: the control "
                 f"workload, which only the machine moves", fontsize=9)
    path = out_dir / ALL_BENCHMARKS_FILE
    fig.savefig(path, dpi=DPI)
    return path
