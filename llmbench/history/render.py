"""A judged history as text, markdown or JSON."""

from __future__ import annotations

import json

from llmbench.gate.render import format_seconds, markdown_table, text_table
from llmbench.history.changepoints import PENALTY
from llmbench.history.judge import HistoryResult, SeriesResult

COLUMNS = ("benchmark", "runs", "newest", "its level", "between runs", "ratio", "machine",
           "interval", "verdict", "change points")


def _shift(r: SeriesResult, s, result: HistoryResult | None = None) -> str:
    commit = f" ({r.shift_commit(s)})" if r.shift_commit(s) else ""
    same_code = ", same commit around it" if r.code_changed(s) is False else ""
    control = result.control_move(s) if result is not None else None
    beside = f", control x{control:.3f}" if control is not None else ""
    return f"run {r.shift_run(s):04d}{commit} x{s.ratio:.3f} p={s.p:.2g}{same_code}{beside}"


def _shifts(r: SeriesResult, result: HistoryResult | None = None) -> str:
    return "; ".join(_shift(r, s, result) for s in r.shifts) or "-"


def _level_median(r: SeriesResult) -> float | None:
    """The median of the newest level's runs (newest excluded), in the series' unit."""
    level = sorted(p.median_s for p in r.series.points[r.level_start():-1])
    return level[len(level) // 2] if level else None


def _spread(between, key: str) -> str:
    """A benchmark's spread between runs of one code (SD of log medians), with the A/A
    observations it rests on; "-" until two runs share their code."""
    spread = between.spreads.get(key)
    return "-" if spread is None else f"{spread.own_sigma:.1%} ({spread.own_df} A/A)"


def _row(r: SeriesResult, result: HistoryResult | None = None,
         spread: str = "-") -> tuple[str, ...]:
    """One table row. The ratio and interval are as measured: the verdict was reached
    without the machine's share, so its interval is moved by that share to compare."""
    v = r.newest
    points = r.series.points
    level = _level_median(r)
    machine = r.machine_ratio()
    ratio, low, high = r.measured()
    interval = f"[{low:.3f}, {high:.3f}]" if low is not None else "-"
    if result is not None:  # all benchmarks together: levels relative to each one's usual
        newest, level_cell = f"x{points[-1].median_s:.3f}", (
            f"x{level:.3f}" if level is not None else "-")
    else:
        newest = format_seconds(points[-1].median_s)
        level_cell = format_seconds(level) if level is not None else "-"
    return (r.series.name, str(len(points)), newest, level_cell, spread,
            f"{ratio:.3f}" if ratio is not None else "-",
            f"{machine:.3f}" if machine is not None else "-", interval, v.word,
            _shifts(r, result))


def _rows(result: HistoryResult) -> list[tuple[str, ...]]:
    between = result.history.between
    return [*(_row(r, spread=_spread(between, r.series.key)) for r in result.results),
            *([_row(result.machine, result)] if result.machine else [])]


def header_lines(result: HistoryResult) -> list[str]:
    h = result.history
    m = len(result.results) + (result.machine is not None)
    return [f"history: {h.title}, {len(h.runs)} runs ({h.runs[0]:04d} to {h.newest:04d}) "
            f"in {h.folder}",
            f"change points: PELT on log medians (penalty {PENALTY:g} sigma^2 ln n), each "
            f"kept only if a permutation test of its neighbouring levels passes alpha "
            f"{result.alpha:g} for the whole history ({m} series) and moves the level, as "
            f"judged and as measured, beyond the threshold; 'same commit around it': the "
            f"machine moved, not the code",
            "each benchmark is judged after removing what it shares with the other "
            "benchmarks and the control workload in the same run, and 'all benchmarks "
            "together' (their median move) after removing what it shares with the control; "
            "'machine' is that share of the newest run's measured ratio, and each change "
            "point of all benchmarks together gives the control's move across it",
            f"newest run: against the prediction interval of its own level (runs since the "
            f"last change point), at 1 - alpha/{m}; a regression also exceeds the threshold, "
            f"as judged and as measured", spread_line(h.between)]


def spread_line(between) -> str:
    """The spread between runs of one code over all benchmarks: what a stored comparison
    must clear, as the history has measured it."""
    spreads = sorted(s.own_sigma for s in between.spreads.values())
    if not spreads:
        return ("between runs: not measured yet (no two runs of one clean commit with the "
                "same libraries)")
    return (f"between runs of one code (SD of log medians, {between.observations} A/A "
            f"observations): median benchmark {spreads[len(spreads) // 2]:.1%}, worst "
            f"{spreads[-1]:.1%}")


def summary_line(result: HistoryResult) -> str:
    counts: dict[str, int] = {}
    for r in result.results:
        counts[r.newest.word] = counts.get(r.newest.word, 0) + 1
    shifts = sum(len(r.shifts) for r in result.results)
    outcome = "REGRESSION" if result.regressions else "PASS"
    told = ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items()))
    together = ""
    if result.machine is not None:
        together = f", all together {result.machine.newest.word}"
        shifts += len(result.machine.shifts)
    return (f"{outcome}: newest run {result.history.newest:04d}: {told} of "
            f"{len(result.results)}{together}; {shifts} change points in the history")


def render_text(result: HistoryResult) -> str:
    table = text_table(COLUMNS, _rows(result))
    return "\n".join([*header_lines(result), "", *table, "", summary_line(result)])


def render_markdown(result: HistoryResult) -> str:
    def esc(cell: str) -> str:
        return cell.replace("|", "\\|")

    lines = ["### llmbench history", "", *(f"- {esc(line)}" for line in header_lines(result)),
             "", *markdown_table(COLUMNS, _rows(result), "<" + ">" * (len(COLUMNS) - 3) + "<<")]
    return "\n".join([*lines, "", f"**{esc(summary_line(result))}**"])


def _change_points(r: SeriesResult, result: HistoryResult | None = None) -> list[dict]:
    return [{"run": r.shift_run(s), "commit": r.shift_commit(s), "ratio": s.ratio, "p": s.p,
             "code_changed": r.code_changed(s),
             **({"control_ratio": result.control_move(s)} if result is not None else {})}
            for s in r.shifts]


def to_json(result: HistoryResult) -> dict:
    h = result.history
    machine = result.machine
    return {
        "folder": str(h.folder), "title": h.title, "runs": list(h.runs), "alpha": result.alpha,
        "exit_code": result.exit_code,
        "benchmarks": [{
            "key": r.series.key, "name": r.series.name, "group": r.series.group,
            "threshold": r.threshold,
            "points": [vars(p) for p in r.series.points],
            "follows_machine": r.beta,
            "between_runs": (None if (b := h.between.spreads.get(r.series.key)) is None
                             else {"sd_log": b.own_sigma, "aa_observations": b.own_df}),
            "change_points": _change_points(r),
            "newest": {**r.newest.to_json(), "machine_ratio": r.machine_ratio()},
        } for r in result.results],
        "all_benchmarks": None if machine is None else {
            "threshold": machine.threshold,
            "levels": {p.run: p.median_s for p in machine.series.points},
            "change_points": _change_points(machine, result),
            "follows_control": machine.beta,
            "newest": {**machine.newest.to_json(), "machine_ratio": machine.machine_ratio(),
                       "control_ratio": result.control_newest()},
        },
    }


def render(result: HistoryResult, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(to_json(result), indent=2)
    return render_markdown(result) if fmt == "markdown" else render_text(result)
