"""`llmbench report LOAD.json -o DIR` for a run `llmbench load` saved: report.md with one
row per level (served and failed requests, throughputs, latency percentiles, the client's
lag, the objectives' verdict), the capacity when it was searched, each level's summary
lines, and the pictures (`llmbench.load.plot`): latency against throughput with the last
level's timeline, and every level's timeline on its own.

A load run is not a suite run: it has no environment folder and no baseline, so it is
recognised by its own shape (`is_load_run`) before the suite's reader is asked.
"""

from __future__ import annotations

import os
from pathlib import Path

from llmbench import runs
from llmbench.errors import UserError
from llmbench.gate.render import markdown_table
from llmbench.report.write import report_path, writing_into

FIGURE = "load.png"
TIMELINE = "timeline-{number}.png"


def is_load_run(document: object) -> bool:
    """Whether a saved JSON document is one `llmbench load` wrote."""
    return isinstance(document, dict) and isinstance(document.get("levels"), list) and (
        "url" in document)


def _pair(summary: dict | None) -> str:
    return "–" if summary is None else f"{summary['p50']:.1f} / {summary['p99']:.1f}"


def _verdict(summary: dict) -> str:
    if not summary["client_kept_schedule"]:
        return "client behind schedule"
    objectives = summary.get("objectives")
    return "–" if objectives is None else objectives["verdict"]


def level_table(levels: list[dict]) -> list[str]:
    """One row per level, as the summary line says it."""
    head = ["level", "served", "failed", "req/s", "tokens/s", "TTFT p50 / p99 ms",
            "ITL p50 / p99 ms", "latency p50 / p99 ms", "client lag p99 ms", "objectives"]
    rows = []
    for level in levels:
        s = level["summary"]
        lag = s.get("lag_ms")
        rows.append([s["load"], str(s["num_ok"]), str(s["num_errors"]),
                     f"{s['request_throughput']:.2f}", f"{s['token_throughput']:.1f}",
                     _pair(s["ttft_ms"]), _pair(s["itl_ms"]), _pair(s["latency_ms"]),
                     "–" if lag is None else f"{lag['p99']:.2f}", _verdict(s)])
    return markdown_table(head, rows, "<" + ">" * 8 + "<")


def render(document: dict, timelines: list[str]) -> str:
    from llmbench.load.result import summary_line

    levels = document["levels"]
    lines = [f"# Load run: {document['url']}", "",
             f"Protocol `{document['api']}`, tokens counted by `{document['model']}`'s "
             f"tokenizer; workload: {document.get('workload', 'the shipped questions')}.", ""]
    if (capacity := document.get("capacity")) is not None and capacity.get("line"):
        lines += [f"**{capacity['line']}**", ""]
    lines += ["## Levels", "", *level_table(levels), "",
              "## Summary lines", "", "```",
              *(summary_line(level["summary"]) for level in levels), "```", "",
              "## Latency against throughput", "", f"![latency against throughput]({FIGURE})",
              "", "## Timelines", ""]
    for level, name in zip(levels, timelines, strict=True):
        lines += [f"### {level['summary']['load']}", "", f"![timeline]({name})", ""]
    return "\n".join(lines)


def write_load_report(document: dict, out_dir: str | os.PathLike, *, force: bool = False
                      ) -> tuple[Path, list[str]]:
    """Write report.md and the pictures into `out_dir`; refuse an existing report unless
    `force`. Returns report.md's path and the pictures' names."""
    from llmbench.load.plot import draw, draw_timeline

    out = Path(out_dir)
    target = report_path(out, force)
    levels = document["levels"]
    if not levels:
        raise UserError("this load run holds no level: nothing to report")
    timelines = [TIMELINE.format(number=n) for n in range(1, len(levels) + 1)]
    with writing_into(out):
        if force:  # a timeline of a level this run does not have must not survive
            for old in out.glob(TIMELINE.format(number="*")):
                old.unlink()
        draw(document, out / FIGURE)
        for level, name in zip(levels, timelines, strict=True):
            draw_timeline(level, out / name)
        runs.write_atomic(target, render(document, timelines), replace=force)
    return target, [FIGURE, *timelines]
