"""The history of one environment: its saved runs, oldest first, as one series per benchmark.

A run is one draw from the machine's run-to-run spread (on a shared machine far wider than
the spread of rounds within a run; figures:
docs/measurements/2026-11-29-stored-and-block-ab.md), so the unit of a history is the run:
each point is one run's median, with its rounds' quartiles as the spread. Runs are ordered
by their number, the order they were saved in.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from llmbench import runs
from llmbench.gate.noise import NoiseEstimate, estimate_noise

MIN_RUNS = 6  # two segments of three: the least that can place a change point


@dataclass(frozen=True)
class Point:
    """One run of one benchmark."""

    run: int  # the run's number
    commit: str | None  # short commit id (+ any injected slowdown), when the run recorded one
    when: str | None  # when the run was saved (ISO 8601)
    median_s: float
    low_s: float  # the rounds' first quartile
    high_s: float  # the rounds' third quartile


@dataclass(frozen=True)
class Series:
    key: str  # pytest's fullname
    name: str
    group: str | None
    points: tuple[Point, ...]

    @property
    def log_medians(self) -> np.ndarray:
        return np.log([p.median_s for p in self.points])


@dataclass(frozen=True)
class History:
    folder: Path | str  # the environment folder, or a database's URL#environment
    title: str  # what ran where (`Run.title` of the newest run)
    device: str  # its device type, for the default threshold
    runs: tuple[int, ...]  # run numbers, oldest first
    series: tuple[Series, ...]  # in the newest run's order
    # Each run's median of the machine-speed control workload (pure torch, the same in every
    # run), aligned with `runs`; None for a run saved without one.
    control_s: tuple[float | None, ...] = ()
    # How far runs of one code land apart, per benchmark key (`gate.noise`): the spread a
    # stored comparison must clear. Empty until two runs share their code.
    between: NoiseEstimate = field(default_factory=NoiseEstimate)

    @property
    def newest(self) -> int:
        return self.runs[-1]

    @cached_property
    def log_median_matrix(self) -> np.ndarray:
        """Log medians, one row per series and one column per run (NaN where a run lacks
        the benchmark). Computed once: the machine's share, all benchmarks together and the
        control's moves all read it."""
        column = {run: i for i, run in enumerate(self.runs)}
        logs = np.full((len(self.series), len(self.runs)), np.nan)
        for row, series in enumerate(self.series):
            for point in series.points:
                logs[row, column[point.run]] = np.log(point.median_s)
        return logs

    @cached_property
    def control_logs(self) -> np.ndarray:
        """The control workload's log median per run (NaN where a run has none)."""
        if len(self.control_s) != len(self.runs):
            return np.full(len(self.runs), np.nan)
        return np.array([np.log(c) if c else np.nan for c in self.control_s])


def _environment_folder(folder: Path) -> Path:
    """`folder` if it holds runs; else its one environment subfolder; else a one-line error."""
    if runs.list_runs(folder):
        return folder
    if not folder.is_dir():
        raise runs.RunError(f"{folder} is not a folder: pass an environment folder of saved "
                            "runs, e.g. baselines/smollm2-135m-cpu-float32")
    inner = sorted(d for d in folder.iterdir() if d.is_dir() and runs.list_runs(d))
    if len(inner) == 1:
        return inner[0]
    if not inner:
        raise runs.RunError(f"{folder} holds no numbered runs (NNNN_*.json): run "
                            "`pytest --benchmark-only` to save some")
    raise runs.RunError(f"{folder} holds runs of {len(inner)} environments: pass one of "
                        f"{', '.join(d.name for d in inner)}")


def _code(run: runs.Run) -> str | None:
    """What code a run measured: its short commit id, `+dirty` when the tree had uncommitted
    changes (then the commit does not name the code), plus any slowdown injected on top
    (`llmbench.bench.inject`), which changes what ran without changing the commit."""
    code = runs.code_of(run)
    if not code.commit:
        return None
    return (code.commit[:8] + ("+dirty" if code.dirty else "")
            + "".join(f"+slow {name}x{1 + factor:g}" for name, factor in code.injected))


def code_is_named(code: str | None) -> bool:
    """Whether a point's code says exactly what ran: a commit of a clean tree."""
    return bool(code) and "+dirty" not in code


def run_label(point: Point) -> str:
    """A point's run as a plot's axis says it: `7 3d12a17`, with `+dirty` or `+slow` where
    `_code` recorded uncommitted changes or an injected slowdown."""
    if not point.commit:
        return str(point.run)
    commit, _, rest = point.commit.partition("+")
    marks = "".join(f"+{mark}" for mark in ("dirty", "slow") if mark in rest)
    return f"{point.run} {commit[:7]}{marks}"


def _point(number: int, run: runs.Run, code: str | None, bench: runs.Benchmark) -> Point:
    low, high = np.percentile(bench.samples, [25, 75])
    return Point(run=number, commit=code, when=run.datetime, median_s=bench.median_s,
                 low_s=float(low), high_s=float(high))


def load_history(folder: str | os.PathLike | None, pattern: str | None = None,
                 min_runs: int = MIN_RUNS, store: str | None = None) -> History:
    """Every run of one environment, each benchmark's series across them; `pattern` keeps
    benchmarks whose name contains it. From a folder (an environment folder, or a baselines
    folder holding exactly one), or, when `store` is a database, from its environment
    `folder` names (None: the one it holds). One-line `RunError`s: too few runs, runs of
    another environment, a damaged run, no benchmark matching."""
    if store is not None and runs.is_database_url(store):
        return _database_history(runs.open_store(store), folder, pattern, min_runs)
    where = _environment_folder(Path(folder if folder is not None
                                     else store or runs.BASELINES_DIR))
    paths = runs.list_runs(where)
    _enough(where, len(paths), min_runs)
    loaded = [load_entry(p) for p in paths]
    _one_environment(where, loaded)
    return history_of(where, loaded, pattern)


def _database_history(store, environment: str | os.PathLike | None, pattern: str | None,
                      min_runs: int) -> History:
    held = store.environment_keys()
    if environment is None:
        if len(held) != 1:
            raise runs.RunError(f"{store.name} holds runs of {len(held)} environments: name "
                                f"one of {', '.join(held) or 'none yet'}")
        environment = held[0]
    environment = str(environment)
    if environment not in held:
        raise runs.RunError(f"{store.name} holds no runs of {environment}; it holds "
                            f"{', '.join(held) or 'none'}")
    where = f"{store.name}#{environment}"
    refs = store.refs(environment)
    _enough(where, len(refs), min_runs)
    loaded = []
    for ref, run in zip(refs, store.load_many(refs), strict=True):
        if isinstance(run, runs.RunError):
            raise run
        loaded.append(entry_of(run, ref.number, ref.address))
    _one_environment(where, loaded)
    return history_of(where, loaded, pattern)


def _enough(where, count: int, min_runs: int) -> None:
    if count < min_runs:
        raise runs.RunError(f"{where} holds {count} runs; a history needs at least "
                            f"{min_runs} to place a change point")


def _one_environment(where, loaded: list[Entry]) -> None:
    for entry in loaded[:-1]:
        differences = runs.environment_differences(entry.run.environment,
                                                   loaded[-1].run.environment)
        if differences:
            raise runs.RunError(f"run {entry.number:04d} in {where} was measured in another "
                                f"environment than the newest ({'; '.join(differences)}): a "
                                "history is one environment; move that run out")


@dataclass(frozen=True)
class Entry:
    """One saved run as a history reads it."""

    number: int
    run: runs.Run
    code: str | None  # what code it measured (`_code`)


def load_entry(path: Path) -> Entry:
    """One saved run of a folder; a one-line `RunError` when it is damaged, of a newer
    format, or holds a median a history cannot take the log of."""
    run = runs.run_from_json(runs.read_json(path), str(path), path=path)
    return entry_of(run, runs.run_number(path), str(path))


def entry_of(run: runs.Run, number: int, name: str) -> Entry:
    """A run read from any store, as a history takes it (`name` says which in messages)."""
    for bench in run.benchmarks.values():
        if bench.samples and not bench.median_s > 0:
            raise runs.RunError(f"{name}: {bench.name} has a median of {bench.median_s!r} s, "
                                "which no run measures: the file is damaged")
    try:
        code = _code(run)
    except (TypeError, ValueError, AttributeError) as exc:
        raise runs.RunError(f"{name}: its commit or injected slowdowns are damaged "
                            f"({exc})") from None
    return Entry(number, run, code)


def history_of(where: Path | str, loaded: list[Entry], pattern: str | None = None, *,
               every_benchmark: bool = False) -> History:
    """The history of runs already loaded (oldest first, one environment): each benchmark of
    the newest run, as a series across them; with `every_benchmark`, also those only older
    runs have (their series end before the newest run, which has no verdict on them)."""
    newest = loaded[-1].run
    references = dict(newest.benchmarks)
    if every_benchmark:
        for entry in reversed(loaded):  # each older key as its newest run measured it
            for key, bench in entry.run.benchmarks.items():
                references.setdefault(key, bench)
    series = []
    for key, bench in references.items():
        if pattern and pattern.lower() not in bench.name.lower():
            continue
        # A run where the same name did other work (a profile since edited) is another
        # measurement, not a point of this one's series.
        points = tuple(_point(e.number, e.run, e.code, e.run.benchmarks[key]) for e in loaded
                       if key in e.run.benchmarks and e.run.benchmarks[key].samples
                       and not bench.shape_differences(e.run.benchmarks[key]))
        series.append(Series(key, bench.name, bench.group, points))
    if not series:
        raise runs.RunError(f"no benchmark of the newest run in {where} matches -k {pattern!r}")
    control = tuple(float(np.median(e.run.control_s)) if e.run.control_s else None
                    for e in loaded)
    return History(where, newest.title, newest.device or "cpu", tuple(e.number for e in loaded),
                   tuple(series), control, estimate_noise([e.run for e in loaded]))
