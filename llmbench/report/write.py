"""`llmbench report`: a saved run (and optionally a baseline) -> report.md and PNG plots.

report.md has, per benchmark group, a table of median, IQR, tokens/s and ms/token (TTFT and
ITL where recorded); with a baseline, each row adds the baseline median, the ratio of medians
with its CI and the verdict, judged by the regression gate (`gate.compare_runs`, the same
rule and header as `llmbench compare`). Then the plots (drawn by `plots`), then both runs'
environments side by side. An existing report is never overwritten unless asked to.

This module runs the command: it reads the runs (`report_run`), asks the gate for verdicts,
draws the plots (`plots`), renders the markdown (`report_md`) and writes the files.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from llmbench.errors import UserError
from llmbench.gate import compare as gate
from llmbench.report import plots
from llmbench.report.markdown import render_markdown
from llmbench.report.run import Run, load_run
from llmbench.runs import store as baselines

REPORT_NAME = "report.md"


def compare(baseline: Run, candidate: Run, options: gate.GateOptions | None = None
            ) -> gate.GateResult:
    """The gate's verdicts on every benchmark both runs hold (UserError if they can't be)."""
    return gate.compare_runs(baselines.run_from_json(baseline.payload, str(baseline.path)),
                             baselines.run_from_json(candidate.payload, str(candidate.path)),
                             options)


def latest_baseline(run_path: str | os.PathLike) -> Path:
    """What `--baseline latest` means for a run: the newest other run of its environment in
    its folder (`baselines.latest_comparable`, as the pytest gate's `--compare-to=latest`);
    `baselines.NoBaseline` when there is none."""
    run = load_run(run_path)  # a damaged RUN is named as such, before any search
    return baselines.latest_comparable(run.path.parent, run.section.get("environment"),
                                       exclude=[run.path])


@dataclass(frozen=True)
class ReportResult:
    markdown: Path
    plots: tuple[plots.PlotOutcome, ...]
    gate: gate.GateResult | None


def write_report(run_path: str | os.PathLike, out_dir: str | os.PathLike,
                 baseline_path: str | os.PathLike | None = None, *, force: bool = False,
                 options: gate.GateOptions | None = None) -> ReportResult:
    """Write report.md and the plots into out_dir; refuse an existing report unless force."""
    out = Path(out_dir)
    target = out / REPORT_NAME
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a folder: choose another -o")
    if target.exists() and not force:
        raise UserError(f"{out} already holds a report: pass --force to replace it, or "
                        "choose another -o folder")
    run = load_run(run_path)
    baseline = load_run(baseline_path) if baseline_path is not None else None
    result = compare(baseline, run, options) if baseline is not None else None
    try:
        out.mkdir(parents=True, exist_ok=True)
        if force:  # a plot this run cannot draw must not survive from the last report
            for name in plots.PLOT_FILES:
                (out / name).unlink(missing_ok=True)
        outcomes = plots.draw_all(run, baseline, out)
        _write_text(target, render_markdown(run, result, baseline, outcomes), replace=force)
    except FileExistsError:
        raise UserError(f"{out} already holds a report: pass --force to replace it") from None
    except OSError as exc:
        raise UserError(f"cannot write the report into {out}: {exc.strerror or exc}") from None
    return ReportResult(markdown=target, plots=outcomes, gate=result)


def _write_text(path: Path, text: str, *, replace: bool) -> None:
    """Write atomically; without `replace`, fail if the file appeared meanwhile."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails if the name exists: never clobbers
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
