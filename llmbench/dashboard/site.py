"""`llmbench dashboard`: write the static site of saved runs.

The site is written into a fresh temporary folder beside SITE_DIR and swapped into place
only when complete, so a failed build never leaves half a site nor loses the last one.
SITE_DIR may be replaced only when it is empty or holds exactly an earlier dashboard: its
`dashboard.json` names the files it wrote, and a folder holding anything else is refused,
since nothing saved is overwritten silently.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from llmbench import gate, runs
from llmbench.dashboard import collect, figures, pages
from llmbench.errors import UserError

MARKER = "dashboard.json"
GENERATOR = "llmbench dashboard"


def _files_in(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if not p.is_dir()}


def _check_target(site: Path) -> None:
    """Refuse a SITE_DIR that holds anything an earlier dashboard did not write."""
    if site.exists() and not site.is_dir():
        raise UserError(f"{site} is a file: pass a folder for the site")
    if not site.is_dir() or not any(site.iterdir()):
        return
    try:
        record = json.loads((site / MARKER).read_text(encoding="utf-8"))
        written = set(record["files"]) if record.get("generator") == GENERATOR else None
    except (OSError, ValueError, KeyError, TypeError):
        written = None
    if written is None:
        raise UserError(f"{site} is not empty and holds no earlier dashboard: pass a new or "
                        "empty folder, so nothing in it is overwritten")
    others = sorted(_files_in(site) - written - {MARKER})
    if others:
        raise UserError(f"{site} holds files the earlier dashboard did not write "
                        f"({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}): "
                        "move them out, or pass another folder")


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def _write_environment(out: Path, env: collect.Environment, command: str,
                       bisections: Sequence[dict] = (), store: str | None = None) -> None:
    folder = out / env.slug
    (folder / "fig").mkdir(parents=True)
    for bench in env.benchmarks:
        figures.history_figure(bench, folder / "fig" / f"{bench.slug}.history.svg")
        work = figures.work_figure(bench, folder / "fig" / f"{bench.slug}.work.svg")
        reasons = {w.not_counted for w in bench.work.values() if w.not_counted}
        older = [f"{r.number:04d}" for r in env.runs if r.older_format]
        sizes, rows = pages.benchmark_rows(env, bench, bisections, store)
        _write(folder / f"{bench.slug}.html", pages.render(
            "benchmark", title=f"{bench.name}: {env.title}", b=bench, env=env, rows=rows,
            sizes=sizes,
            work_figure=work.name if work else None, older_format=", ".join(older),
            not_counted="; ".join(sorted(reasons)), command=command))


def _write_across(out: Path, environments: list[collect.Environment], command: str
                  ) -> list[collect.Across]:
    """A page per benchmark measured on two or more kinds of machine, in across/."""
    found = collect.across_testbeds(environments)
    if found:
        (out / "across").mkdir()
    for across in found:
        figures.across_figure(across, out / "across" / f"{across.slug}.svg")
        fastest = across.lines[0].newest_s
        _write(out / "across" / f"{across.slug}.html", pages.render(
            "across", title=f"{across.name} across testbeds", across=across,
            fastest=fastest, command=command))
    return found


def _write_ab(folder: Path, ab: collect.KeptAB) -> str:
    """The A/B's page in `folder`; its one-line summary for the index."""
    from llmbench.report.verdict_plot import draw_verdicts  # matplotlib's Agg: only here

    result = gate.compare_runs(ab.baseline, ab.candidate)
    keys = [c.name for c in result.comparisons]
    draw_verdicts(result, folder / f"{ab.slug}-verdicts.png")
    figures.pairs_figure(figures.pair_ratios(ab.baseline, ab.candidate, keys),
                         folder / f"{ab.slug}-pairs.svg")
    names = {k: b.name for k, b in ab.baseline.benchmarks.items()}
    names.update({k: b.name for k, b in ab.candidate.benchmarks.items()})
    only = [("baseline", names.get(k, k)) for k in result.only_baseline]
    only += [("candidate", names.get(k, k)) for k in result.only_candidate]
    summary = gate.summary_line(result)
    _write(folder / f"{ab.slug}.html", pages.render(
        "ab", title=f"A/B {ab.folder.name}", ab=ab, summary=summary,
        comparisons=result.comparisons, short_names=names, only=only,
        base_code=runs.code_of(ab.baseline).short, cand_code=runs.code_of(ab.candidate).short,
        command=shlex.join(["llmbench", "compare", ab.baseline.source, ab.candidate.source])))
    return summary


def _write_abs(out: Path, folders: Sequence[Path]) -> list[dict]:
    names = collect.Names()
    views = []
    for folder in folders:
        ab = collect.read_kept_ab(folder, names)
        summary = ""
        if not ab.problem:
            (out / "ab").mkdir(exist_ok=True)
            try:
                summary = _write_ab(out / "ab", ab)
            except UserError as exc:
                ab = collect.KeptAB(ab.folder, ab.slug, None, None, f"{ab.folder}: {exc}")
        views.append({"folder": ab.folder, "slug": ab.slug, "problem": ab.problem,
                      "summary": summary})
    return views


def _write_bisections(out: Path, files: Sequence[Path], command: str) -> list[dict]:
    """A page per saved bisection (`llmbench bisect`), in out/bisect/; for the index and
    the change points, each one's answer and the commits it covered."""
    from llmbench.history import bisection as words
    from llmbench.report.bisect_report import draw  # matplotlib's Agg: only here
    from llmbench.report.write import json_document

    names = collect.Names()
    views = []
    for path in files:
        slug = names.take(path.stem)
        document = json_document(path)
        if not words.is_bisection(document):
            views.append({"file": path, "slug": slug, "commits": (),
                          "problem": f"{path}: not a bisection saved by `llmbench bisect`"})
            continue
        folder = out / "bisect"
        folder.mkdir(exist_ok=True)
        figure = f"{slug}.png" if draw(document, folder / f"{slug}.png") else None
        answer, _ = words.answer_words(document, quote="")
        _write(folder / f"{slug}.html", pages.render(
            "bisect", title=f"Bisect {path.name}", doc=document, source=str(path),
            answer=words.answer_line(document, quote=""), last=words.culprit_step(document),
            skipped=words.skipped_words(document, quote=""), figure=figure,
            name=lambda sha, d=document: words.commit_name(d, sha, quote=""),
            outcome=lambda step, d=document: words.outcome_words(d, step),
            benchmarks=words.step_benchmarks, command=command))
        views.append({"file": path, "slug": slug, "problem": "", "answer": answer,
                      "commits": tuple(document["commits"])})
    return views


def _publish(out: Path, site: Path) -> None:
    """Swap the finished site into place: the earlier one aside first, removed last."""
    umask = os.umask(0)
    os.umask(umask)
    out.chmod(0o777 & ~umask)  # mkdtemp's 0700 would hide the site from a web server
    aside = None
    if site.exists():
        aside = Path(tempfile.mkdtemp(prefix=f".{site.name}-old-", dir=site.parent))
        site.rename(aside / site.name)
    try:
        out.rename(site)
    except OSError:
        if aside is not None:
            (aside / site.name).rename(site)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def build_site(baselines: Path | str, site: Path, *, ab_folders: Sequence[Path] = (),
               bisect_files: Sequence[Path] = (),
               alpha: float = gate.DEFAULT_ALPHA) -> dict:
    """Write the dashboard of every environment under `baselines` (a folder, or a database
    store's URL), the kept A/Bs and the saved bisections into `site`; what was written, as
    `dashboard.json` records it."""
    _check_target(site)
    environments = collect.read_environments(baselines, alpha=alpha)
    source = (["--store", runs.open_store(str(baselines)).name]
              if runs.is_database_url(str(baselines)) else [str(baselines)])
    argv = ["llmbench", "dashboard", *source, "-o", str(site)]
    for folder in ab_folders:
        argv += ["--ab", str(folder)]
    for path in bisect_files:
        argv += ["--bisect", str(path)]
    command = shlex.join(argv)
    store = source[1] if source[0] == "--store" else None
    site.parent.mkdir(parents=True, exist_ok=True)
    out = Path(tempfile.mkdtemp(prefix=f".{site.name}-new-", dir=site.parent))
    try:
        bisections = _write_bisections(out, bisect_files, command)
        for env in environments:
            _write_environment(out, env, command, bisections, store)
        views = _write_abs(out, ab_folders)
        across = _write_across(out, environments, command)
        built = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        _write(out / "index.html", pages.render(
            "index", title="llmbench dashboard", environments=environments, abs=views,
            bisections=bisections, across=across, source=str(baselines), built=built,
            command=command))
        record = {"generator": GENERATOR, "built": built, "source": str(baselines),
                  "environments": {e.slug: {"runs": len(e.runs),
                                            "benchmarks": len(e.benchmarks),
                                            "problems": e.problems} for e in environments},
                  "ab": [{"folder": str(v["folder"]), "problem": v["problem"]}
                         for v in views],
                  "bisect": [{"file": str(v["file"]), "problem": v["problem"]}
                             for v in bisections],
                  "across": [a.name for a in across],
                  "files": sorted(_files_in(out))}
        _write(out / MARKER, json.dumps(record, indent=1))
        _publish(out, site)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    return record
