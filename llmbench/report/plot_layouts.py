"""The layouts of the report's figures: one panel per metric with the group's cases along x
(`line_figure`), grouped bars of latency and tokens/s per condition (`bar_figure`), and
configurations ranked fastest first (`ranked_figure`); the baseline overlaid on each."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import matplotlib
from matplotlib.figure import Figure

from llmbench.report.plot_parts import (
    BASE_LABEL,
    RUN_LABEL,
    WHISKERS,
    Points,
    Skip,
    add_legend,
    add_title,
    draw_series,
    from_zero,
    latency,
    named,
    need_group,
    points,
    scaled,
    sides,
    sweep_axis,
    throughput,
    time_scale,
)

if TYPE_CHECKING:
    from llmbench.runs import Run


@dataclass(frozen=True)
class Panel:
    y_of: Callable  # bench -> (median, low, high) or None
    ylabel: str  # "{unit}" is replaced by s or ms on time panels
    title: str
    is_time: bool = False


@dataclass(frozen=True)
class Series:
    name: str  # "" for the group's one series
    keep: Callable = lambda bench: True
    color: str = "C0"
    marker: str = "o"
    connect: bool = True  # a sweep: joined by lines, its x values become the ticks


def line_figure(fig: Figure, run: Run, baseline: Run | None, *, group: str, x_of: Callable,
                x_label: str, panels: Sequence[Panel], log_x: bool, what: str, note: str = "",
                series: Sequence[Series] = (Series(""),), legend_title: str = WHISKERS
                ) -> None:
    """One panel per metric, the group's cases along x, the baseline overlaid."""
    need_group(run, group)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    xs, ticks = [], []
    for ax, panel in zip(axes, panels, strict=True):
        drawn = {(side, s): points([b for b in side.run.group(group) if s.keep(b)], x_of,
                                   panel.y_of)
                 for side in sides(run, baseline) for s in series}
        factor, unit = time_scale(*drawn.values()) if panel.is_time else (1.0, "")
        for (side, s), p in drawn.items():
            draw_series(ax, scaled(p, factor), side, color=s.color, marker=s.marker,
                        connect=s.connect, label=named(s.name, side))
            xs += p.x
            ticks += p.x if s.connect else []
        ax.set_ylabel(panel.ylabel.format(unit=unit))
        ax.set_title(panel.title, fontsize=10)
        from_zero(ax)
    if not xs:
        raise Skip(f"its {group} benchmarks record none of: "
                   + ", ".join(p.title for p in panels))
    for ax in axes:
        sweep_axis(ax, xs, x_label, log=log_x, ticks=ticks or xs)
    add_title(fig, what, run, note)
    add_legend(fig, legend_title)


def _bars(ax, categories: Sequence[str], values: dict, *, ylabel: str, colors: dict) -> None:
    """values: {(series, side): {category: (mid, lo, hi)}} -> grouped bars with whiskers."""
    keys = [k for k in values if values[k]]
    width = 0.8 / max(len(keys), 1)
    for i, key in enumerate(keys):
        name, side = key
        xs, mids, errs = [], [], [[], []]
        for j, cat in enumerate(categories):
            if cat in values[key]:
                mid, lo, hi = values[key][cat]
                xs.append(j - 0.4 + width * (i + 0.5))
                mids.append(mid)
                errs[0].append(mid - lo)
                errs[1].append(hi - mid)
        ax.bar(xs, mids, width * 0.92, yerr=errs, capsize=3, color=colors[name],
               alpha=0.4 if side.is_baseline else 0.9,
               hatch="//" if side.is_baseline else None, edgecolor=colors[name],
               label=named(name, side))
    ax.set_xticks(range(len(categories)), categories)
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    from_zero(ax)


def bar_figure(fig, run, baseline, *, group: str, category_of: Callable, series_of: Callable,
               what: str, note: str = "") -> None:
    need_group(run, group)
    ax_lat, ax_tps = fig.subplots(1, 2)
    lat, tps, categories, names = {}, {}, [], []
    for side in sides(run, baseline):
        for bench in side.run.group(group):
            cat, name = category_of(bench), series_of(bench)
            categories += [cat] if cat not in categories else []
            names += [name] if name not in names else []
            lat.setdefault((name, side), {})[cat] = latency(bench)
            if (t := throughput(bench)) is not None:
                tps.setdefault((name, side), {})[cat] = t
    factor, unit = time_scale(*(Points((), (), (), tuple(v[2] for v in d.values()))
                                for d in lat.values()))
    lat = {k: {c: tuple(x * factor for x in v) for c, v in d.items()} for k, d in lat.items()}
    # The default cycle repeats after 10 colours, and the engines group has more series.
    palette = ([f"C{i}" for i in range(10)] if len(names) <= 10
               else list(matplotlib.colormaps["tab20"].colors))
    colors = {name: palette[i % len(palette)] for i, name in enumerate(names)}
    _bars(ax_lat, categories, lat, ylabel=f"latency ({unit})", colors=colors)
    _bars(ax_tps, categories, tps, ylabel="output tokens/s", colors=colors)
    ax_lat.set_title("end-to-end latency", fontsize=10)
    ax_tps.set_title("output throughput", fontsize=10)
    add_title(fig, what, run, note)
    add_legend(fig)



def ranked_figure(fig, run, baseline, *, group: str, panel_of: Callable, label_of: Callable,
                  value_of: Callable, xlabel: str, what: str) -> None:
    """One panel per `panel_of` value (a batch size), one horizontal bar per configuration
    (`label_of`), sorted so that the fastest (the lowest `value_of` median) is on top and
    named; whiskers span the fastest to the slowest round, and the baseline's median is a
    hollow diamond on its configuration's bar."""
    need_group(run, group)
    rows: dict = {}  # panel -> {label: (mid, lo, hi)}
    for bench in run.group(group):
        if (value := value_of(bench)) is not None:
            rows.setdefault(panel_of(bench), {})[label_of(bench)] = value
    if not rows:
        raise Skip(f"its {group} benchmarks record no output tokens")
    before: dict = {}
    for bench in baseline.group(group) if baseline is not None else ():
        if (value := value_of(bench)) is not None:
            before.setdefault(panel_of(bench), {})[label_of(bench)] = value[0]
    axes = fig.subplots(1, len(rows), squeeze=False)[0]
    for ax, (panel, values) in zip(axes, sorted(rows.items()), strict=True):
        ranked = sorted(values, key=lambda label: values[label][0])  # fastest first
        ys = range(len(ranked))
        mids = [values[label][0] for label in ranked]
        errs = [[m - values[lb][1] for m, lb in zip(mids, ranked, strict=True)],
                [values[lb][2] - m for m, lb in zip(mids, ranked, strict=True)]]
        colors = ["tab:green"] + ["tab:blue"] * (len(ranked) - 1)
        ax.barh(ys, mids, xerr=errs, capsize=2, color=colors, alpha=0.85, label=RUN_LABEL)
        for y, label in zip(ys, ranked, strict=True):
            ax.text(0, y, f" {values[label][0]:.3g}", va="center", fontsize=8, color="white",
                    fontweight="bold")
            if label in before.get(panel, {}):
                ax.plot(before[panel][label], y, "D", mfc="none", mec="black", ms=6,
                        label=BASE_LABEL)
        ax.set_yticks(list(ys), ranked, fontsize=8)
        ax.get_yticklabels()[0].set_fontweight("bold")
        ax.invert_yaxis()  # the fastest at the top
        ax.set_xlabel(xlabel)
        ax.set_title(f"{panel}: fastest {ranked[0]}", fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_xlim(left=0)
    fig.suptitle(f"{what}\n{run.title}", fontsize=11)
    add_legend(fig)
