"""The dashboard's HTML: the Jinja2 templates in templates/ (autoescaped), and the values
they show.

Every page is self-contained: its style sheet and its one small script are inline, its
pictures are files beside it, and nothing is fetched from a network, so the site works from
file:// and from any static host.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

import jinja2
from markupsafe import Markup

from llmbench.dashboard import figures
from llmbench.dashboard.collect import Benchmark, ChangeEvent, Environment
from llmbench.gate.render import format_seconds
from llmbench.history import MIN_RUNS

# The docs page that explains each kind of page (docs/, built by `nox -s docs`).
DOCS = {"index": "docs/dashboard.md and docs/history.md",
        "benchmark": "docs/dashboard.md, docs/history.md and docs/bisect.md",
        "ab": "docs/ab.md and docs/verdicts.md",
        "bisect": "docs/bisect.md",
        "across": "docs/dashboard.md and docs/stores.md"}

# templates/: the pages, their one style sheet and their one script, inlined by `include`.
_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("llmbench.dashboard", "templates"), autoescape=True,
    undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def verdict_html(bench: Benchmark) -> Markup:
    """The history's verdict on the newest run: a coloured word, its ratio and interval."""
    if bench.judged is None:
        return Markup('<span class="verdict too-few-runs">too few runs</span>')
    word = bench.judged.newest.word
    ratio, low, high = bench.judged.measured()
    extra = f" x{ratio:.3f} [{low:.3f}, {high:.3f}]" if ratio is not None else ""
    return Markup('<span class="verdict {}">{}</span>{}').format(
        word.replace(" ", "-"), word, extra)


def shifts_text(bench: Benchmark) -> str:
    if bench.judged is None:
        return ""
    r = bench.judged
    return "; ".join(f"run {r.shift_run(s):04d}"
                     + (f" ({r.shift_commit(s)})" if r.shift_commit(s) else "")
                     + f" x{s.ratio:.2f}" for s in r.shifts)


def change_words(event: ChangeEvent) -> str:
    """What moved at a change point: each benchmark's ratio, and all of them together."""
    parts = [f"{name} x{ratio:.2f}" for name, ratio in event.moved]
    if event.together is not None:
        control = (f", control workload x{event.control:.2f}"
                   if event.control is not None else "")
        parts.append(f"all benchmarks together x{event.together:.2f}{control}")
    return "; ".join(parts)


def newest_median(env: Environment, bench: Benchmark) -> str:
    """The newest median, naming its run when the newest run lacks the benchmark."""
    point = bench.series.points[-1]
    shown = format_seconds(point.median_s)
    return shown if env.runs and point.run == env.runs[-1].number else (
        f"{shown} (run {point.run:04d})")


def between(env: Environment, bench: Benchmark) -> str:
    """How far this benchmark's runs of one code land apart (the history's measure)."""
    spread = env.history.between.spreads.get(bench.series.key) if env.history else None
    return "-" if spread is None else f"{spread.own_sigma:.1%} ({spread.own_df} A/A)"


def spark(env: Environment, bench: Benchmark) -> Markup:
    points = bench.series.points
    return Markup(figures.sparkline(
        [p.median_s for p in points], injected=[p.run in env.injected for p in points],
        shifts=[s.index for s in bench.judged.shifts] if bench.judged else []))


def render(template: str, **values) -> str:
    return _ENV.get_template(f"{template}.html").render(
        docs=DOCS[template], seconds=format_seconds, min_runs=MIN_RUNS, verdict=verdict_html,
        shifts=shifts_text, change_words=change_words, newest_median=newest_median,
        between=between, spark=spark, **values)


def bisect_command(env: Environment, bench: Benchmark, store: str | None = None) -> str:
    """The command that bisects a benchmark's newest change point to its commit."""
    words = ["llmbench", "bisect", *(["--store", store] if store else []), "--change-point",
             str(env.folder), bench.series.key]
    return shlex.join(words)


def _bisected(commit: str | None, bisections: Sequence[dict]) -> dict | None:
    """A saved bisection whose range holds the commit a change point starts at."""
    if not commit:
        return None
    short = commit.split("+", 1)[0]
    return next((b for b in bisections
                 if any(sha.startswith(short) for sha in b["commits"])), None)


def benchmark_rows(env: Environment, bench: Benchmark, bisections: Sequence[dict] = (),
                   store: str | None = None) -> tuple[list[str], list[dict]]:
    """The runs table of a benchmark's page: each run's point, its work and memory, and the
    change point that starts at it, with the command that bisects the newest one and the
    saved bisection whose range holds its commit."""
    info = {r.number: r for r in env.runs}
    sizes = next((tuple(s for s, _ in w.sizes) for w in bench.work.values() if w.sizes), ())
    starts, bisect = {}, {}
    if bench.judged is not None:
        for s in bench.judged.shifts:
            run = bench.judged.shift_run(s)
            starts[run] = f"change point x{s.ratio:.3f} (p {s.p:.2g})"
            bisect[run] = {"found": _bisected(bench.judged.shift_commit(s), bisections),
                           # Only where a bisect can answer: the newest change point, a
                           # slowdown, with other named code on its two sides.
                           "command": (bisect_command(env, bench, store)
                                       if s is bench.judged.shifts[-1] and s.ratio > 1
                                       and bench.judged.code_changed(s) else None)}
    rows = []
    for point in bench.series.points:
        run = info.get(point.run)
        work = bench.work.get(point.run)
        counts = dict(work.sizes) if work and work.sizes else {}
        rows.append({"point": point,
                     "when": (run.when or "")[:19].replace("T", " ") if run else "",
                     "commit": (run.commit if run else None) or "-",
                     "injected": run.injected if run else "",
                     "work": [f"{counts[s]:,}" if s in counts else "-" for s in sizes],
                     "memory": _mib(bench.memory.get(point.run)),
                     "shift": starts.get(point.run, ""),
                     "bisect": bisect.get(point.run)})
    return list(sizes), rows


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.1f} MiB"
