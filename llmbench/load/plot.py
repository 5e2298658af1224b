"""Pictures of a load run: latency against throughput across its levels, where a server's
knee shows (latency flat, then rising steeply once the rate passes what it can serve), and
a timeline of one level's requests, where queueing shows (bars lengthening over time).

Both draw from the JSON `llmbench load` writes (`levels`, each with its summary and
samples), so a saved run can be drawn again without the server.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from llmbench.load.result import RequestSample

DPI = 110
PERCENTILE_STYLES = (("p50", "-", "o"), ("p99", "--", "s"))


def _latency_panel(ax, levels: list[dict], key: str, title: str, limit_ms: float | None
                   ) -> None:
    points = [(lv["summary"]["request_throughput"], lv["summary"][key]) for lv in levels
              if lv["summary"][key] is not None]
    points.sort(key=lambda p: p[0])
    for name, style, marker in PERCENTILE_STYLES:
        ax.plot([x for x, _ in points], [s[name] for _, s in points], style, marker=marker,
                label=name)
    if limit_ms is not None:
        ax.axhline(limit_ms, color="tab:red", linestyle=":", label=f"objective {limit_ms:g} ms")
    ax.set_xlabel("served requests per second")
    ax.set_ylabel("milliseconds")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.legend(fontsize="small")


def _timeline_panel(ax, level: dict) -> None:
    """One horizontal bar per request, from its send to its end, with its first token
    marked; requests outside the objectives or failed in red, the warm-up and cool-down
    in grey."""
    limits = (level.get("objectives") or {}).get("limits_ms", {})
    for saved in level["samples"]:
        sample = RequestSample.from_dict(saved)
        if sample.sent_s is None:
            continue
        outside = any(sample.objective_value_s(metric) * 1e3 > limit
                      for metric, limit in limits.items())
        color = ("0.7" if not sample.measured
                 else "tab:red" if sample.error is not None or outside else "tab:blue")
        ax.hlines(sample.index, sample.sent_s, sample.sent_s + sample.latency_s, color=color,
                  linewidth=1.5)
        if sample.ttft_s is not None:
            ax.plot(sample.sent_s + sample.ttft_s, sample.index, "|", color="black",
                    markersize=4)
    ax.set_xlabel("seconds from the level's start")
    ax.set_ylabel("request")
    ax.set_title(f"{level['summary']['load']}: each request from send to end "
                 "(| first token; red: outside the objectives or failed; grey: left out)")


def _figure(size: tuple[float, float]) -> Figure:
    fig = Figure(figsize=size, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def draw(run: dict, path: Path, timeline_level: int = -1) -> None:
    """Write the figure for a `llmbench load` JSON document to `path` (PNG, SVG or PDF, by
    its suffix): TTFT and ITL percentiles against throughput, and the timeline of one level
    (the last by default)."""
    levels = run["levels"]
    limits = (levels[0].get("objectives") or {}).get("limits_ms", {}) if levels else {}
    fig = _figure((12, 8))
    top = fig.subfigures(2, 1, height_ratios=(1, 1.2))
    left, right = top[0].subplots(1, 2)
    _latency_panel(left, levels, "ttft_ms", "time to first token", limits.get("ttft"))
    _latency_panel(right, levels, "tpot_ms", "inter-token latency (per request)",
                   limits.get("itl"))
    _timeline_panel(top[1].subplots(), levels[timeline_level])
    fig.savefig(path, dpi=DPI)


def draw_timeline(level: dict, path: Path) -> None:
    """Write one level's timeline alone to `path`."""
    fig = _figure((12, 4.5))
    _timeline_panel(fig.subplots(), level)
    fig.savefig(path, dpi=DPI)
