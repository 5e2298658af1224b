"""The dashboard's HTML: the Jinja2 templates in templates/ (autoescaped), and the values
they show.

Every page is self-contained: its style sheet and its one small script are inline, its
pictures are files beside it, and nothing is fetched from a network, so the site works from
file:// and from any static host.
"""

from __future__ import annotations

import jinja2
from markupsafe import escape

from llmbench.dashboard.collect import Benchmark, Environment
from llmbench.gate.render import format_seconds
from llmbench.history import MIN_RUNS

DOCS = ("docs/history.md and docs/verdicts.md in the llmbench repository (`nox -s docs` "
        "builds them)")

# templates/: the pages, their one style sheet and their one script, inlined by `include`.
_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("llmbench.dashboard", "templates"), autoescape=True,
    undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def seconds(value: float) -> str:
    return format_seconds(value)


def verdict_html(bench: Benchmark) -> str:
    """The history's verdict on the newest run, as a coloured word and its ratio."""
    if bench.judged is None:
        return '<span class="verdict too-few-runs">too few runs</span>'
    word = bench.judged.newest.verdict
    ratio, low, high = bench.judged.measured()
    shown = escape(word)
    extra = f" x{ratio:.3f} [{low:.3f}, {high:.3f}]" if ratio is not None else ""
    return f'<span class="verdict {word.replace(" ", "-")}">{shown}</span>{extra}'


def shifts_text(bench: Benchmark) -> str:
    if bench.judged is None:
        return ""
    r = bench.judged
    return "; ".join(f"run {r.shift_run(s):04d}" + (f" ({r.shift_commit(s)})"
                                                    if r.shift_commit(s) else "")
                     + f" x{s.ratio:.2f}" for s in r.shifts)


def render(template: str, **values) -> str:
    return _ENV.get_template(f"{template}.html").render(docs=DOCS, seconds=seconds,
                                              min_runs=MIN_RUNS,
                                              verdict=verdict_html, shifts=shifts_text,
                                              **values)


def benchmark_rows(env: Environment, bench: Benchmark) -> tuple[list[str], list[dict]]:
    """The runs table of a benchmark's page: each run's point, its work, and the change
    point that starts at it."""
    info = {r.number: r for r in env.runs}
    sizes = next((tuple(s for s, _ in w.sizes) for w in bench.work.values() if w.sizes), ())
    starts = {}
    if bench.judged is not None:
        for s in bench.judged.shifts:
            starts[bench.judged.shift_run(s)] = f"change point x{s.ratio:.3f} (p {s.p:.2g})"
    rows = []
    for point in bench.series.points:
        run = info.get(point.run)
        work = bench.work.get(point.run)
        counts = dict(work.sizes) if work and work.sizes else {}
        rows.append({"point": point, "when": (run.when or "")[:19].replace("T", " ") if run
                     else "", "commit": (run.commit if run else None) or "-",
                     "injected": run.injected if run else "",
                     "work": [f"{counts[s]:,}" if s in counts else "-" for s in sizes],
                     "memory": _mib(bench.memory.get(point.run)),
                     "shift": starts.get(point.run, "")})
    return list(sizes), rows


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.1f} MiB"
