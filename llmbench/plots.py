"""The report's PNG plots: medians with min-max whiskers, the baseline overlaid when given.

Drawn on matplotlib's object API (``Figure`` + the Agg canvas), never pyplot: headless by
construction, no global state, safe in parallel tests. Each plot reads its groups from a run
(``report.Run``); a plot whose groups the run lacks is skipped with the reason, not drawn empty.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator
from matplotlib.transforms import offset_copy

if TYPE_CHECKING:
    from .report import Bench, Run

DPI = 120
RUN_LABEL, BASE_LABEL = "this run", "baseline"
WHISKERS = "median; whiskers: min–max"


@dataclass(frozen=True)
class PlotOutcome:
    file: str
    title: str
    description: str
    path: Path | None  # None: skipped
    skipped: str | None = None


class Skip(Exception):
    """The run lacks what this plot needs; the message says what."""


@dataclass(frozen=True)
class Points:
    x: tuple[float, ...]
    mid: tuple[float, ...]
    lo: tuple[float, ...]
    hi: tuple[float, ...]


def points(benches: Sequence[Bench], x_of: Callable, y_of: Callable) -> Points:
    """(x, (mid, lo, hi)) for each bench where both are known, sorted by x."""
    rows = []
    for bench in benches:
        x, y = x_of(bench), y_of(bench)
        if isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 and y is not None:
            rows.append((float(x), *y))
    rows.sort()
    return Points(*(tuple(col) for col in zip(*rows, strict=True))) if rows else Points(
        (), (), (), ())


def latency(bench: Bench):
    return bench.median_s, bench.min_s, bench.max_s


def throughput(bench: Bench):
    """Tokens/s: the median's, and the slowest and fastest rounds' (same tokens every round)."""
    tps = bench.tokens_per_second
    if tps is None or bench.min_s <= 0:
        return None
    return tps, tps * bench.median_s / bench.max_s, tps * bench.median_s / bench.min_s


def per_token_ms(count_key: str):
    def y_of(bench: Bench):
        count = bench.value(count_key)
        if not isinstance(count, (int, float)) or count <= 0:
            return None
        return tuple(1e3 * v / count for v in (bench.median_s, bench.min_s, bench.max_s))
    return y_of


def _time_scale(*groups: Points) -> tuple[float, str]:
    top = max((v for p in groups for v in p.hi), default=0.0)
    return (1.0, "s") if top >= 2.0 else (1e3, "ms")


def _scaled(p: Points, factor: float) -> Points:
    return Points(p.x, *(tuple(v * factor for v in col) for col in (p.mid, p.lo, p.hi)))


def _series(ax, p: Points, side: Side, *, color: str, label: str, marker: str = "o",
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


def _log_y(ax, label: str) -> None:
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel(label)


def _sweep_axis(ax, xs: Sequence[float], label: str, log: bool,
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


def _from_zero(ax) -> None:
    ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.05)


def _legend(fig: Figure, title: str = WHISKERS) -> None:
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


def _title(fig: Figure, what: str, run: Run, note: str = "") -> None:
    fig.suptitle(f"{what}\n{run.title}{note}", fontsize=11)


def _fixed(benches: Sequence[Bench], key: str, unit: str) -> str:
    """'; 128 prompt tokens' when every case shares the value, for the title."""
    values = [bench.value(key) for bench in benches]
    same = values and values[0] is not None and all(v == values[0] for v in values)
    return f"; {values[0]} {unit}" if same else ""


def _need(run: Run, group: str) -> list[Bench]:
    benches = run.group(group)
    if not benches:
        raise Skip(f"the run has no {group} benchmarks")
    return benches


@dataclass(frozen=True, eq=False)  # eq=False: hashed by identity, a dict key per plot
class Side:
    """One of the runs on a plot: this run, or the baseline drawn over it."""

    run: Run
    label: str
    is_baseline: bool
    paired: bool  # both runs are on the plot: nudge them apart


def _sides(run: Run, baseline: Run | None) -> list[Side]:
    sides = [Side(run, RUN_LABEL, False, baseline is not None)]
    return sides + ([Side(baseline, BASE_LABEL, True, True)] if baseline is not None else [])


def _named(name: str, side: Side) -> str:
    return side.label if not name else f"{name} ({side.label})"


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


def _line_figure(fig: Figure, run: Run, baseline: Run | None, *, group: str, x_of: Callable,
                 x_label: str, panels: Sequence[Panel], log_x: bool, what: str, note: str = "",
                 series: Sequence[Series] = (Series(""),), legend_title: str = WHISKERS
                 ) -> None:
    """One panel per metric, the group's cases along x, the baseline overlaid."""
    _need(run, group)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    xs, ticks = [], []
    for ax, panel in zip(axes, panels, strict=True):
        drawn = {(side, s): points([b for b in side.run.group(group) if s.keep(b)], x_of,
                                   panel.y_of)
                 for side in _sides(run, baseline) for s in series}
        factor, unit = _time_scale(*drawn.values()) if panel.is_time else (1.0, "")
        for (side, s), p in drawn.items():
            _series(ax, _scaled(p, factor), side, color=s.color, marker=s.marker,
                    connect=s.connect, label=_named(s.name, side))
            xs += p.x
            ticks += p.x if s.connect else []
        ax.set_ylabel(panel.ylabel.format(unit=unit))
        ax.set_title(panel.title, fontsize=10)
        _from_zero(ax)
    if not xs:
        raise Skip(f"its {group} benchmarks record none of: "
                   + ", ".join(p.title for p in panels))
    for ax in axes:
        _sweep_axis(ax, xs, x_label, log=log_x, ticks=ticks or xs)
    _title(fig, what, run, note)
    _legend(fig, legend_title)


# --- the plots -------------------------------------------------------------------------------

LATENCY = Panel(latency, "latency ({unit})", "end-to-end latency", is_time=True)
THROUGHPUT = Panel(throughput, "output tokens/s", "output throughput")


def output_sweep(fig, run, baseline):
    _line_figure(fig, run, baseline, group="output-sweep", x_of=lambda b: b.value(
        "output_tokens"), x_label="output tokens", panels=(LATENCY, THROUGHPUT), log_x=False,
        what="Latency and tokens/s against output length",
        note=_fixed(run.group("output-sweep"), "input_tokens", "prompt tokens"))


def input_sweep(fig, run, baseline):
    chat = [b for b in run.group("input-sweep") if b.extra.get("chat")]
    chat_name = f"chat passage, {chat[0].value('input_tokens')} tokens" if chat else "chat"
    _line_figure(fig, run, baseline, group="input-sweep", x_of=lambda b: b.value(
        "input_tokens"), x_label="input (prompt) tokens", panels=(LATENCY, THROUGHPUT),
        log_x=True, what="Latency and tokens/s against prompt length",
        note=_fixed(run.group("input-sweep"), "output_tokens", "output tokens"),
        series=(Series("", lambda b: not b.extra.get("chat")),
                Series(chat_name, lambda b: bool(b.extra.get("chat")), "C3", "*", False)))


def batch_size(fig, run, baseline):
    per = {b.value("output_tokens") / b.value("batch_size") for b in run.group("batch-size")
           if b.value("output_tokens") and b.value("batch_size")}
    _line_figure(fig, run, baseline, group="batch-size", x_of=lambda b: b.value("batch_size"),
                 x_label="batch size (prompts)", log_x=True,
                 panels=(Panel(throughput, "total output tokens/s", "throughput"),
                         Panel(latency, "latency of the whole batch ({unit})", "latency",
                               is_time=True)),
                 what="Throughput against batch size (static batching)",
                 note=f"; {next(iter(per)):g} new tokens per prompt" if len(per) == 1 else "")


def server_generate(fig, run, baseline):
    _line_figure(fig, run, baseline, group="server-generate",
                 x_of=lambda b: b.value("output_tokens"), x_label="output tokens", log_x=True,
                 panels=(LATENCY, THROUGHPUT),
                 what="One request at a time: through the server against the engine directly",
                 series=(Series("through the server", lambda b: "server" in b.name),
                         Series("engine directly", lambda b: "server" not in b.name, "C2",
                                "s")))


def server_concurrency(fig, run, baseline):
    _line_figure(fig, run, baseline, group="server-concurrency",
                 x_of=lambda b: b.value("concurrency"), x_label="concurrent requests",
                 log_x=True,
                 panels=(Panel(lambda b: b.metric("ttft_ms"), "time to first token (ms)",
                               "TTFT"),
                         Panel(lambda b: b.metric("itl_ms"), "inter-token latency (ms)", "ITL"),
                         Panel(throughput, "total output tokens/s", "throughput")),
                 what="Server: TTFT, ITL and throughput against concurrency",
                 legend_title=f"{WHISKERS} (TTFT, ITL: lowest to highest percentile recorded)")


def prefill_decode(fig, run, baseline):
    if not run.group("prefill") and not run.group("decode"):
        raise Skip("the run has neither prefill nor decode benchmarks")
    ax = fig.subplots()
    every = []
    for side in _sides(run, baseline):
        pre = points(side.run.group("prefill"), lambda b: b.value("input_tokens"),
                     per_token_ms("input_tokens"))
        dec = points(side.run.group("decode"), lambda b: b.value("decode_context")
                     or b.value("input_tokens"), per_token_ms("output_tokens"))
        _series(ax, pre, side, color="C0", label=_named("prefill, per prompt token", side))
        _series(ax, dec, side, color="C1", marker="s",
                label=_named("decode, per generated token", side))
        every += [pre, dec]
    _sweep_axis(ax, [x for p in every for x in p.x], "tokens in context (prompt length for "
                "prefill, cached tokens for decode)", log=True)
    _log_y(ax, "cost per token (ms, log scale)")
    _title(fig, "Prefill against decode: cost per token", run)
    _legend(fig)


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
               label=_named(name, side))
    ax.set_xticks(range(len(categories)), categories)
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    _from_zero(ax)


def _bar_figure(fig, run, baseline, *, group: str, category_of: Callable, series_of: Callable,
                what: str, note: str = "") -> None:
    _need(run, group)
    ax_lat, ax_tps = fig.subplots(1, 2)
    lat, tps, categories, names = {}, {}, [], []
    for side in _sides(run, baseline):
        for bench in side.run.group(group):
            cat, name = category_of(bench), series_of(bench)
            categories += [cat] if cat not in categories else []
            names += [name] if name not in names else []
            lat.setdefault((name, side), {})[cat] = latency(bench)
            if (t := throughput(bench)) is not None:
                tps.setdefault((name, side), {})[cat] = t
    factor, unit = _time_scale(*(Points((), (), (), tuple(v[2] for v in d.values()))
                                 for d in lat.values()))
    lat = {k: {c: tuple(x * factor for x in v) for c, v in d.items()} for k, d in lat.items()}
    colors = {name: f"C{i}" for i, name in enumerate(names)}
    _bars(ax_lat, categories, lat, ylabel=f"latency ({unit})", colors=colors)
    _bars(ax_tps, categories, tps, ylabel="output tokens/s", colors=colors)
    ax_lat.set_title("end-to-end latency", fontsize=10)
    ax_tps.set_title("output throughput", fontsize=10)
    _title(fig, what, run, note)
    _legend(fig)


def kv_cache(fig, run, baseline):
    benches = run.group("kv-cache")
    _bar_figure(fig, run, baseline, group="kv-cache",
                category_of=lambda b: "KV cache on" if b.value("use_cache") else "KV cache off",
                series_of=lambda b: "", what="KV cache on against off",
                note=_fixed(benches, "input_tokens", "prompt tokens")
                + _fixed(benches, "output_tokens", "new tokens"))


def sequential_vs_batched(fig, run, baseline):
    _bar_figure(fig, run, baseline, group="sequential-vs-batched",
                category_of=lambda b: str(b.value("mode")), series_of=lambda b: "",
                what="The same prompts one after another against one static batch",
                note=_fixed(run.group("sequential-vs-batched"), "batch_size", "prompts"))


def engines(fig, run, baseline):
    _bar_figure(fig, run, baseline, group="engines",
                category_of=lambda b: "batch of "
                f"{b.value('engine_batch') or b.value('batch_size')}",
                series_of=lambda b: str(b.value("engine")),
                what="Our prefill/decode loop against transformers' generate")


@dataclass(frozen=True)
class PlotSpec:
    file: str
    title: str
    description: str
    draw: Callable
    size: tuple[float, float] = (10.0, 4.6)


PLOTS = (
    PlotSpec("output_sweep.png", "Output-length sweep",
             "End-to-end latency and output tokens/s against the number of generated tokens "
             "at a fixed prompt: latency should grow linearly and tokens/s level off.",
             output_sweep),
    PlotSpec("input_sweep.png", "Prompt-length sweep",
             "End-to-end latency and output tokens/s against prompt length at a fixed number "
             "of new tokens (log-scale x); the chat-formatted passage is the star.",
             input_sweep),
    PlotSpec("prefill_decode.png", "Prefill against decode",
             "Milliseconds per token of prefill (per prompt token, one parallel pass) and of "
             "decode (per generated token, one step at a time), against the tokens in context.",
             prefill_decode, (8.0, 5.0)),
    PlotSpec("kv_cache.png", "KV cache on and off",
             "Latency and tokens/s of the same generation with the KV cache and without it.",
             kv_cache),
    PlotSpec("batch_size.png", "Batch size",
             "Total output tokens/s and whole-batch latency of static batches against the "
             "batch size.", batch_size),
    PlotSpec("sequential_vs_batched.png", "Sequential against batched",
             "The same prompts generated one after another, and together as one static batch.",
             sequential_vs_batched),
    PlotSpec("engines.png", "Engines",
             "Our prefill/decode loop against transformers' generate on the same work, "
             "single prompt and batched.", engines),
    PlotSpec("server_generate.png", "Server overhead",
             "Latency and tokens/s of one non-streamed request through the HTTP server and of "
             "the same generation straight through the engine, against output length.",
             server_generate),
    PlotSpec("server_concurrency.png", "Server under concurrency",
             "Time to first token, inter-token latency and total output tokens/s through the "
             "server against the number of concurrent requests.", server_concurrency,
             (13.0, 4.6)),
)
PLOT_FILES = tuple(spec.file for spec in PLOTS)


def draw_all(run: Run, baseline: Run | None, out_dir: Path) -> tuple[PlotOutcome, ...]:
    """Draw every plot the run has data for into out_dir; say why each other one is not."""
    outcomes = []
    for spec in PLOTS:
        fig = Figure(figsize=spec.size, dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        try:
            spec.draw(fig, run, baseline)
        except Skip as why:
            outcomes.append(PlotOutcome(spec.file, spec.title, spec.description, None, str(why)))
            continue
        path = out_dir / spec.file
        fig.savefig(path, dpi=DPI)
        outcomes.append(PlotOutcome(spec.file, spec.title, spec.description, path))
    return tuple(outcomes)

