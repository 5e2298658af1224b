"""`llmbench dashboard`: write the static site of saved runs.

The site is written into a fresh temporary folder beside SITE_DIR and moved into place only
when complete, so a failed build never leaves half a site. SITE_DIR may be replaced only
when it is empty or holds an earlier dashboard (its `dashboard.json` says so); any other
folder is refused, since nothing saved is overwritten silently.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.figure import Figure

from llmbench import gate, runs
from llmbench.dashboard import collect, figures, pages
from llmbench.errors import UserError

MARKER = "dashboard.json"


def _check_target(site: Path) -> None:
    if site.exists() and not site.is_dir():
        raise UserError(f"{site} is a file: pass a folder for the site")
    if site.is_dir() and any(site.iterdir()) and not (site / MARKER).is_file():
        raise UserError(f"{site} is not empty and holds no earlier dashboard: pass a new or "
                        "empty folder, so nothing in it is overwritten")


def _pairs_figure(result: gate.GateResult, base: runs.Run, cand: runs.Run, path: Path) -> None:
    """Each paired benchmark's pairs, as candidate/baseline ratios on a log axis."""
    names = [c.name for c in result.comparisons]
    fig = Figure(figsize=(9, 0.45 * len(names) + 1.2), layout="constrained")
    ax = fig.add_subplot()
    by_name = {b.name: (b, cand.benchmarks.get(k)) for k, b in base.benchmarks.items()}
    for row, name in enumerate(names):
        b, c = by_name.get(name, (None, None))
        if b is None or c is None:
            continue
        pairs = zip(b.samples, c.samples, strict=False)  # a side may hold an unpaired round
        ratios = [cs / bs for bs, cs in pairs if bs > 0 and cs > 0]
        jitter = [row + 0.25 * math.sin(i * 2.39996) for i in range(len(ratios))]
        ax.scatter(ratios, jitter, s=9, alpha=0.55, color="tab:blue")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("candidate / baseline, one point per pair of rounds (log scale)")
    FigureCanvasSVG(fig).print_svg(str(path))


def _write_ab(out: Path, ab: collect.KeptAB) -> str:
    """The A/B's page; its one-line summary for the index."""
    from llmbench.report.verdict_plot import draw_verdicts

    result = gate.compare_runs(ab.baseline, ab.candidate)
    draw_verdicts(result, out / f"ab-{ab.slug}-verdicts.png")
    _pairs_figure(result, ab.baseline, ab.candidate, out / f"ab-{ab.slug}-pairs.svg")
    summary = gate.summary_line(result)
    (out / f"ab-{ab.slug}.html").write_text(pages.render(
        "ab", title=f"A/B {ab.folder.name}", ab=ab, summary=summary,
        comparisons=result.comparisons, base_code=runs.code_of(ab.baseline).short,
        cand_code=runs.code_of(ab.candidate).short,
        command=f"llmbench compare {ab.baseline.source} {ab.candidate.source}"),
        encoding="utf-8")
    return summary


def _write_environment(out: Path, env: collect.Environment, command: str) -> None:
    folder = out / env.slug
    folder.mkdir()
    for bench in env.benchmarks:
        figures.history_figure(bench, folder / f"{bench.slug}.svg")
        work = figures.work_figure(bench, folder / f"{bench.slug}-work.svg")
        reasons = {w.not_counted for w in bench.work.values() if w.not_counted}
        sizes, rows = pages.benchmark_rows(env, bench)
        (folder / f"{bench.slug}.html").write_text(pages.render(
            "benchmark", title=f"{bench.name}: {env.title}", b=bench, env=env, rows=rows,
            sizes=sizes,
            measured=bench.judged.measured() if bench.judged else (None, None, None),
            work_figure=work.name if work else None,
            not_counted="; ".join(sorted(reasons)), command=command), encoding="utf-8")


def build_site(baselines: Path, site: Path, *, ab_folders: Sequence[Path] = (),
               alpha: float = gate.DEFAULT_ALPHA) -> dict:
    """Write the dashboard of every environment under `baselines` (and the kept A/Bs) into
    `site`; what was written, as `dashboard.json` records it."""
    _check_target(site)
    environments = collect.read_environments(baselines, alpha=alpha)
    abs_ = [collect.read_kept_ab(Path(f)) for f in ab_folders]
    command = (f"llmbench dashboard {baselines} -o {site}"
               + "".join(f" --ab {f}" for f in ab_folders))
    site.parent.mkdir(parents=True, exist_ok=True)
    out = Path(tempfile.mkdtemp(prefix=f".{site.name}-", dir=site.parent))
    try:
        for env in environments:
            _write_environment(out, env, command)
        views = []
        for ab in abs_:
            summary = ""
            if not ab.problem:
                try:
                    summary = _write_ab(out, ab)
                except UserError as exc:
                    ab = collect.KeptAB(ab.folder, ab.slug, None, None, f"{ab.folder}: {exc}")
            views.append({"folder": ab.folder, "slug": ab.slug, "problem": ab.problem,
                          "summary": summary})
        built = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        (out / "index.html").write_text(pages.render(
            "index", title="llmbench dashboard", environments=environments, abs=views,
            source=str(baselines), built=built, command=command,
            spark=lambda b: figures.sparkline(
                [p.median_s for p in b.series.points],
                injected=[p.run in b.injected for p in b.series.points],
                shifts=[s.index for s in b.judged.shifts] if b.judged else []),
            ), encoding="utf-8")
        record = {"built": built, "source": str(baselines),
                  "environments": {e.slug: {"runs": len(e.runs),
                                            "benchmarks": len(e.benchmarks),
                                            "problems": e.problems} for e in environments},
                  "ab": [{"folder": str(v["folder"]), "problem": v["problem"]}
                         for v in views]}
        (out / MARKER).write_text(json.dumps(record, indent=1), encoding="utf-8")
        if site.exists():
            shutil.rmtree(site)
        out.rename(site)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    return record
