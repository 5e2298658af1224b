"""`llmbench report BISECT.json -o DIR` for a bisection `llmbench bisect` saved: report.md
with the answer, the culprit against its parent, and every step (which commit against which,
its outcome, its time, and each benchmark's verdict), beside `bisect.png`: each measured
commit's ratio to GOOD along the range, with its interval, the culprit marked.

It reads the saved JSON only (the report never imports the A/B machinery), so a bisection
run on one machine can be reported anywhere.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from llmbench import runs
from llmbench.gate.render import markdown_table
from llmbench.history.bisection import (
    answer_words,
    commit_name,
    culprit_step,
    outcome_words,
    skipped_words,
    step_benchmarks,
)
from llmbench.report.write import report_path, writing_into

FIGURE = "bisect.png"
DPI = 110


def _bold(answer: str, more: str) -> str:
    return f"**{answer}**" + (f": {more}" if more else "")


def render(document: dict, figure: str | None) -> str:
    commits = document["commits"]
    along = "with every merged commit" if document.get("all_parents") else "along first parents"
    lines = [f"# Bisect: {commit_name(document, document['good'])} to "
             f"{commit_name(document, document['bad'])}", "",
             f"{len(commits)} commit(s) {along}; "
             f"{'counted work' if document.get('kind') == 'work' else 'paired A/B'} steps.", "",
             _bold(*answer_words(document)), ""]
    parent = document.get("parent")
    if (last := culprit_step(document)) is not None:
        lines += [f"Against its parent {commit_name(document, parent)}: "
                  f"{outcome_words(document, last)}; {step_benchmarks(last)}", ""]
    if (skipped := skipped_words(document)) is not None:
        lines += [skipped, ""]
    rows = [[str(number), commit_name(document, s["commit"]), commit_name(document, s["baseline"]),
             outcome_words(document, s), f"{s['seconds']:.0f} s", step_benchmarks(s)]
            for number, s in enumerate(document["steps"], 1)]
    lines += ["## Steps", "", *markdown_table(
        ["step", "commit", "against", "outcome", "time", "benchmarks"], rows, "><<<><"), ""]
    if figure is not None:
        lines += ["## Along the range", "", f"![each commit against GOOD]({figure})", ""]
    return "\n".join(lines)


def draw(document: dict, path: Path) -> bool:
    """Each commit measured against GOOD: its ratio per benchmark with the interval, by its
    place in the range; False (nothing drawn) for counted work or no ratio."""
    place = {sha: number for number, sha in enumerate(document["commits"], 1)}
    place[document["good"]] = 0
    points: dict[str, list[tuple[int, float, float, float]]] = {}
    for step in document["steps"]:
        if step["baseline"] != document["good"]:
            continue
        for b in step["benchmarks"]:
            if "ratio" in b and math.isfinite(b["ratio"]):
                points.setdefault(b["label"], []).append(
                    (place[step["commit"]], b["ratio"], b["ci_low"], b["ci_high"]))
    if not points:
        return False
    fig = Figure(figsize=(10, 4.5), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for label, found in sorted(points.items()):
        found.sort()
        xs = [x for x, *_ in found]
        ys = [y for _, y, _, _ in found]
        low = [max(y - lo, 0) if math.isfinite(lo) else 0 for _, y, lo, _ in found]
        high = [max(hi - y, 0) if math.isfinite(hi) else 0 for _, y, _, hi in found]
        ax.errorbar(xs, ys, yerr=[low, high], fmt="o", capsize=3, label=label)
    ax.axhline(1.0, color="0.5", linewidth=0.8)
    if document.get("culprit") in place:
        ax.axvline(place[document["culprit"]] - 0.5, color="tab:red", linestyle="--",
                   label="the culprit's place")
    ax.set_xlabel("commit, in order from GOOD (0) to BAD")
    ax.set_ylabel("time against GOOD (x)")
    ax.set_title("each measured commit against GOOD, with its interval")
    ax.legend(fontsize="small")
    fig.savefig(path, dpi=DPI)
    return True


def write_bisect_report(document: dict, out_dir: str | os.PathLike, *, force: bool = False
                        ) -> tuple[Path, list[str]]:
    """Write report.md (and bisect.png when there are ratios to draw) into `out_dir`;
    refuse an existing report unless `force`."""
    out = Path(out_dir)
    target = report_path(out, force)
    with writing_into(out):
        if force:  # a figure this bisection cannot draw must not survive
            (out / FIGURE).unlink(missing_ok=True)
        drawn = draw(document, out / FIGURE)
        runs.write_atomic(target, render(document, FIGURE if drawn else None), replace=force)
    return target, [FIGURE] if drawn else []
