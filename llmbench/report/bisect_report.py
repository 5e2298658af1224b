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
from llmbench.report.write import report_path, writing_into

FIGURE = "bisect.png"
DPI = 110
# The saved bisection's outcome names (llmbench.ab.outcomes), as this report shows them.
SLOWER, SKIPPED = "slower", "skipped"
WORK_WORDS = {"slower": "more work", "not slower": "no more work"}


def is_bisection(document: object) -> bool:
    return isinstance(document, dict) and {"good", "bad", "commits", "steps"} <= set(document)


def commit_name(document: dict, sha: str | None, quote: str = "`") -> str:
    """A commit as a reader knows it: its short id (in `quote`s), GOOD or BAD, its subject."""
    if sha is None:
        return "–"
    label = " (GOOD)" if sha == document["good"] else " (BAD)" if sha == document["bad"] else ""
    return f"{quote}{sha[:8]}{quote}{label} {document['subjects'].get(sha, '')}".rstrip()


def outcome_words(document: dict, step: dict) -> str:
    words = WORK_WORDS if document.get("kind") == "work" else {}
    return words.get(step["outcome"], step["outcome"])


def benchmark_words(step: dict) -> str:
    if step["outcome"] == SKIPPED or not step["benchmarks"]:
        return step.get("reason") or "–"
    parts = []
    for b in step["benchmarks"]:
        if "ratio" in b:
            parts.append(f"{b['label']}: {b['verdict']} x{b['ratio']:.3f} "
                         f"[{b['ci_low']:.3f}, {b['ci_high']:.3f}]")
        else:
            parts.append(f"{b['label']}: {b['verdict']} ({b['summary']})")
    return "; ".join(parts)


def answer_words(document: dict, quote: str = "`") -> tuple[str, str]:
    """(the answer, what follows it): the culprit, no commit worse, or the range reached
    and why it stopped there."""
    def name(sha: str | None) -> str:
        return commit_name(document, sha, quote)

    work = document.get("kind") == "work"
    first = "the first commit doing more work" if work else "the first slower commit"
    answer = document.get("answer")
    if answer == "found":
        return f"{first}: {name(document['culprit'])}", ""
    if answer == "none slower":
        return (f"no commit in this range is {'doing more work' if work else 'slower'} "
                "beyond the threshold"), ""
    if answer is None:
        return "not finished", "interrupted: run the same command again to go on"
    return (f"{first} lies from {name(document['first_possible'])} to "
            f"{name(document['last_possible'])}",
            document.get("reason") or "only skipped commits keep the range open")


def culprit_step(document: dict) -> dict | None:
    """The step that paired the culprit with its parent, when there was one."""
    pair = (document.get("parent"), document.get("culprit"))
    if None in pair:
        return None
    return next((s for s in reversed(document["steps"])
                 if (s["baseline"], s["commit"]) == pair), None)


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
                  f"{outcome_words(document, last)}; {benchmark_words(last)}", ""]
    if document.get("skipped"):
        lines += ["Skipped (could not be measured): "
                  + ", ".join(commit_name(document, s) for s in document["skipped"]), ""]
    rows = [[str(number), commit_name(document, s["commit"]), commit_name(document, s["baseline"]),
             outcome_words(document, s), f"{s['seconds']:.0f} s", benchmark_words(s)]
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
