"""`llmbench report`: a saved run (and optionally a baseline) -> report.md and PNG plots.

report.md has, per benchmark group, a table of median, IQR, tokens/s and ms/token (TTFT and
ITL where recorded); with a baseline, each row adds the baseline median, the ratio of medians
with its CI and the verdict, judged by the regression gate (`gate.compare_runs`, the same
rule and header as `llmbench compare`). Then the plots (drawn by `plots`), then both runs'
environments side by side. An existing report is never overwritten unless asked to.

This module runs the command: it reads the runs (`llmbench.runs`, which also resolves a
folder to its newest run, as `llmbench compare` does), asks the gate for verdicts, draws the
plots (`plots`), renders the markdown (`markdown`) and writes the files through the runs'
one atomic writer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from llmbench import gate, runs
from llmbench.errors import UserError
from llmbench.report import plots, verdict_plot
from llmbench.report.markdown import render_markdown

REPORT_NAME = "report.md"


def load_run(address: str | os.PathLike, *, samples: bool = False,
             store: str | None = None) -> runs.Run:
    """A run as the report reads it (a file, a folder's newest run, or a run of a database
    store: `runs.load_address`), with pytest-benchmark's timing summary; raw samples only
    when the gate will judge it (`samples`)."""
    return runs.load_address(address, store, samples=samples, summary=True)


def compare(baseline: runs.Run, candidate: runs.Run, options: gate.GateOptions | None = None
            ) -> gate.GateResult:
    """The gate's verdicts on every benchmark both runs hold (UserError if they can't be)."""
    return gate.compare_runs(baseline, candidate, options,
                             history=runs.saved_history(baseline, candidate))


def latest_baseline(run_address: str | os.PathLike, store: str | None = None) -> str:
    """What `--baseline latest` means for a run: the newest other run of its environment in
    its store (`runs.latest_before`, as the pytest gate's `--compare-to=latest`), by its
    address; `runs.NoBaseline` when there is none."""
    run = load_run(run_address, store=store)  # a damaged RUN is named as such, before any search
    return runs.latest_before(run).origin.address


@dataclass(frozen=True)
class ReportResult:
    markdown: Path
    plots: tuple[plots.PlotOutcome, ...]
    gate: gate.GateResult | None


def _like_for_like(baseline: runs.Run | None, result: gate.GateResult | None
                   ) -> runs.Run | None:
    """The baseline as the plots may draw it beside the run: without the benchmarks that did
    other work there (another profile's tokens would sit at the same x as this run's)."""
    if baseline is None or result is None or not result.other_work:
        return baseline
    return dataclasses.replace(baseline, benchmarks={
        k: b for k, b in baseline.benchmarks.items() if k not in result.other_work})


def write_report(run_path: str | os.PathLike, out_dir: str | os.PathLike,
                 baseline_path: str | os.PathLike | None = None, *, force: bool = False,
                 options: gate.GateOptions | None = None,
                 store: str | None = None) -> ReportResult:
    """Write report.md and the plots into out_dir; refuse an existing report unless force."""
    out = Path(out_dir)
    target = report_path(out, force)
    judged = baseline_path is not None  # the gate needs raw samples on both sides
    run = load_run(run_path, samples=judged, store=store)
    baseline = load_run(baseline_path, samples=True, store=store) if judged else None
    result = compare(baseline, run, options) if baseline is not None else None
    with writing_into(out):
        if force:  # a plot this run cannot draw must not survive from the last report
            for name in (*plots.PLOT_FILES, verdict_plot.FILE):
                (out / name).unlink(missing_ok=True)
        if result is not None and result.comparisons:
            verdict_plot.draw_verdicts(result, out / verdict_plot.FILE)
        outcomes = plots.draw_all(run, _like_for_like(baseline, result), out)
        runs.write_atomic(target, render_markdown(run, result, baseline, outcomes),
                          replace=force)
    return ReportResult(markdown=target, plots=outcomes, gate=result)


def json_document(address: str | os.PathLike) -> object | None:
    """The JSON of a file `address` names, or None when it names no readable JSON file (a
    folder, a database address): what a report is of is then the suite's reader's to say."""
    path = Path(address)
    if path.suffix != ".json" or not path.is_file():
        return None
    try:
        return json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def report_path(out: Path, force: bool) -> Path:
    """Where report.md goes in `out`: refused when `out` is a file, or already holds a
    report and `force` is not set (checked before anything is measured or drawn)."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a folder: choose another -o")
    target = out / REPORT_NAME
    if target.exists() and not force:
        raise UserError(f"{out} already holds a report: pass --force to replace it, or "
                        "choose another -o folder")
    return target


@contextlib.contextmanager
def writing_into(out: Path) -> Iterator[None]:
    """Create `out` and write into it; a report that appeared meanwhile, or a folder that
    cannot be written, is one line."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        yield
    except FileExistsError:
        raise UserError(f"{out} already holds a report: pass --force to replace it") from None
    except OSError as exc:
        raise UserError(f"cannot write the report into {out}: {exc.strerror or exc}") from None

