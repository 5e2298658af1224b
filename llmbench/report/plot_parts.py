"""The pieces every report figure is made of: medians with min-max whiskers (`Points`), this
run and the baseline drawn over it (`PlottedRun`), axes, titles and a legend that never covers data.

Drawn on matplotlib's object API; a figure whose groups the run lacks raises `Skip` with the
reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator
from matplotlib.transforms import offset_copy

if TYPE_CHECKING:
    from llmbench.runs import Benchmark, Run

RUN_LABEL, BASE_LABEL = "this run", "baseline"
WHISKERS = "median; whiskers: min–max"


class Skip(Exception):
    """The run lacks what this plot needs; the message says what."""


@dataclass(frozen=True)
class Points:
    x: tuple[float, ...]
    mid: tuple[float, ...]
    lo: tuple[float, ...]
    hi: tuple[float, ...]


def points(benches: Sequence[Benchmark], x_of: Callable, y_of: Callable) -> Points:
    """(x, (mid, lo, hi)) for each bench where both are known, sorted by x."""
    rows = []
    for bench in benches:
        x, y = x_of(bench), y_of(bench)
        if isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 and y is not None:
            rows.append((float(x), *y))
    rows.sort()
    return Points(*(tuple(col) for col in zip(*rows, strict=True))) if rows else Points(
        (), (), (), ())


def latency(bench: Benchmark):
    return bench.median_s, bench.min_s, bench.max_s


def throughput(bench: Benchmark):
    """Tokens/s: the median's, and the slowest and fastest rounds' (same tokens every round)."""
    tps = bench.tokens_per_second
    if tps is None or bench.min_s <= 0:
        return None
    return tps, tps * bench.median_s / bench.max_s, tps * bench.median_s / bench.min_s


def per_token_ms(count_key: str):
    def y_of(bench: Benchmark):
        count = bench.value(count_key)
        if not isinstance(count, (int, float)) or count <= 0:
            return None
        return tuple(1e3 * v / count for v in (bench.median_s, bench.min_s, bench.max_s))
    return y_of


def time_scale(*groups: Points) -> tuple[float, str]:
    top = max((v for p in groups for v in p.hi), default=0.0)
    return (1.0, "s") if top >= 2.0 else (1e3, "ms")


def scaled(p: Points, factor: float) -> Points:
    return Points(p.x, *(tuple(v * factor for v in col) for col in (p.mid, p.lo, p.hi)))


def draw_series(ax, p: Points, side: PlottedRun, *, color: str, label: str, marker: str = "o",
                connect: bool = True) -> None:
    """Medians joined by a line, min-max whiskers; the baseline dashed with hollow markers."""
    if not p.x:
        return
    # With a baseline, shift both sets a few points apart so their whiskers never overlap.
    is_baseline = side.is_baseline
    nudge = (5 if is_baseline else -5) if side.paired else 0
    shift = offset_copy(ax.transData, fig=ax.figure, x=nudge, units="points")
    yerr = [[m - lo for m, lo in zip(p.mid, p.lo, strict=True)],
            [hi - m for m, hi in zip(p.mid, p.hi, strict=True)]]
    ax.errorbar(p.x, p.mid, yerr=yerr, transform=shift, color=color, marker=marker,
                linestyle=("--" if is_baseline else "-") if connect else "none",
                markerfacecolor="white" if is_baseline else color, capsize=3, linewidth=1.5,
                markersize=6, label=label, alpha=0.85 if is_baseline else 1.0)
    # Artists drawn through an offset transform do not count toward autoscaling: add the
    # whisker ends to the data limits by hand.
    ax.update_datalim([*zip(p.x, p.lo, strict=True), *zip(p.x, p.hi, strict=True)])
    ax.autoscale_view()


def log_y(ax, label: str) -> None:
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel(label)


def sweep_axis(ax, xs: Sequence[float], label: str, log: bool,
               ticks: Sequence[float] | None = None) -> None:
    ax.set_xlabel(label)
    if log:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_minor_locator(NullLocator())
        low, high = min(xs), max(xs)
        ax.set_xlim(low / 2 ** 0.4, high * 2 ** 0.4)
    else:
        span = (max(xs) - min(xs)) or max(xs) or 1.0
        ax.set_xlim(min(xs) - 0.08 * span, max(xs) + 0.08 * span)
    ax.set_xticks(sorted(set(xs if ticks is None else ticks)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.grid(True, alpha=0.3)


def from_zero(ax) -> None:
    ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.05)


def add_legend(fig: Figure, title: str = WHISKERS) -> None:
    """One figure legend below the axes: it can never cover data."""
    handles, labels = [], []
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    if handles:
        # As many columns as fit the figure's width (about 11 characters per inch at 9 pt).
        room = fig.get_figwidth() * 11
        ncols = max(1, min(len(handles), 4, int(room // (max(map(len, labels)) + 6))))
        fig.legend(handles, labels, loc="outside lower center", ncols=ncols,
                   title=title, frameon=False, fontsize=9, title_fontsize=9)


def add_title(fig: Figure, what: str, run: Run, note: str = "") -> None:
    fig.suptitle(f"{what}\n{run.title}{note}", fontsize=11)


def fixed_note(benches: Sequence[Benchmark], key: str, unit: str) -> str:
    """'; 128 prompt tokens' when every case shares the value, for the title."""
    values = [bench.value(key) for bench in benches]
    same = values and values[0] is not None and all(v == values[0] for v in values)
    return f"; {values[0]} {unit}" if same else ""


def need_group(run: Run, group: str) -> list[Benchmark]:
    benches = run.group(group)
    if not benches:
        raise Skip(f"the run has no {group} benchmarks")
    return benches


@dataclass(frozen=True, eq=False)  # eq=False: hashed by identity, a dict key per plot
class PlottedRun:
    """One of the runs on a plot: this run, or the baseline drawn over it."""

    run: Run
    label: str
    is_baseline: bool
    paired: bool  # both runs are on the plot: nudge them apart


def sides(run: Run, baseline: Run | None) -> list[PlottedRun]:
    drawn = [PlottedRun(run, RUN_LABEL, False, baseline is not None)]
    return drawn + ([PlottedRun(baseline, BASE_LABEL, True, True)] if baseline is not None else [])


def named(name: str, side: PlottedRun) -> str:
    return side.label if not name else f"{name} ({side.label})"
