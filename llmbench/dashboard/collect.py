"""What the dashboard shows, read from saved runs: one `Environment` per folder of runs, each
benchmark's series with its history verdict and counted work, and the kept paired A/Bs.

Reading never stops at a bad file. A damaged or truncated run, one of a newer format, or one
measured in another environment than its folder's newest is left out with a one-line
`problem` the page prints; a folder whose runs cannot be read at all becomes an
environment with only problems. Only a baselines folder with no run anywhere is an error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from llmbench import runs
from llmbench.errors import UserError
from llmbench.gate.work import SIZES, counts_of
from llmbench.history import MIN_RUNS, HistoryResult, SeriesResult, judge_history
from llmbench.history.series import Entry, History, Series, history_of, load_entry


@dataclass(frozen=True)
class Work:
    """One run's counted work for one benchmark: (shown name, count) per size, or why none."""

    sizes: tuple[tuple[str, int], ...] = ()
    not_counted: str = ""


@dataclass(frozen=True)
class Benchmark:
    series: Series
    slug: str  # its page's file name, without .html
    judged: SeriesResult | None  # None: too few runs for a history
    work: dict[int, Work]  # by run number
    memory: dict[int, int]  # by run number: the peak memory the case itself added (bytes)
    injected: frozenset[int]  # run numbers that ran with an injected slowdown

    @property
    def name(self) -> str:
        return self.series.name


@dataclass(frozen=True)
class RunInfo:
    number: int
    when: str | None
    commit: str | None  # short id, `+dirty` for uncommitted changes
    injected: str  # "" or what was slowed, e.g. "decode_step x1.15"
    file: str


@dataclass(frozen=True)
class ChangeEvent:
    """Change points of several benchmarks at one run: what moved there, and whether the
    code or the machine moved it (as `llmbench history` decides)."""

    run: int
    commit: str | None
    moved: tuple[tuple[str, float], ...]  # (benchmark, ratio after/before)
    cause: str  # "code changed", "same code: the machine moved", "no commit recorded"
    together: float | None = None  # all benchmarks together, when they shifted here
    control: float | None = None  # the control workload across that shift


@dataclass
class Environment:
    folder: Path
    slug: str
    title: str = ""
    facts: dict[str, str] = field(default_factory=dict)
    runs: list[RunInfo] = field(default_factory=list)
    benchmarks: list[Benchmark] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    history: History | None = None
    judged: HistoryResult | None = None
    changes: list[ChangeEvent] = field(default_factory=list)  # newest first


@dataclass(frozen=True)
class KeptAB:
    """A paired A/B kept by `llmbench ab --keep DIR`."""

    folder: Path
    slug: str
    baseline: runs.Run | None
    candidate: runs.Run | None
    problem: str = ""


def slug(text: str) -> str:
    """A file name for `text`: letters, digits, '-', '_' and '.', the rest as '-'."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "x"


def _unique_slugs(names: Sequence[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for name in names:
        base = slug(name)
        seen[base] = seen.get(base, 0) + 1
        out.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return out


def environment_folders(baselines: Path) -> list[Path]:
    """`baselines` itself when it holds runs, else each subfolder that does."""
    if not baselines.is_dir():
        raise UserError(f"{baselines} is not a folder: pass the folder `pytest --benchmark-only` "
                        "saves runs in (default baselines/)")
    if runs.list_runs(baselines):
        return [baselines]
    folders = sorted(d for d in baselines.iterdir() if d.is_dir() and runs.list_runs(d))
    if not folders:
        raise UserError(f"{baselines} holds no saved runs (NNNN_*.json in a folder per "
                        "environment): run `nox -s bench` or `pytest --benchmark-only` first")
    return folders


def _facts(run: runs.Run) -> dict[str, str]:
    """What the environment is, as a reader names it: model, device and its name, dtype,
    threads, and any engine option away from its default."""
    env = run.environment or {}
    facts = {"model": env.get("model"), "device": env.get("device"),
             "hardware": env.get("device_name"), "dtype": env.get("dtype"),
             "threads": env.get("threads")}
    for key, default in (("kv_cache", "dynamic"), ("compile", False), ("attn", "auto"),
                         ("weights", "native")):
        if env.get(key, default) != default:
            facts[key] = env.get(key)
    return {k: str(v) for k, v in facts.items() if v not in (None, "")}


def _injected_words(run: runs.Run) -> str:
    slowed = runs.injected_slowdowns(run)
    return ", ".join(f"{name} x{1 + factor:g}" for name, factor in sorted(slowed.items()))


def _work(bench: runs.Benchmark) -> Work | None:
    counts = counts_of(bench.extra_info)
    if isinstance(counts, str):
        return Work(not_counted=counts)
    if not counts:
        return None
    return Work(tuple((shown, int(counts.get(key) or 0)) for key, shown in SIZES))


def _one_environment(entries: list[Entry]) -> tuple[list[Entry], list[Entry]]:
    """The runs of the environment most of the folder's runs share (the newest's on a tie),
    and the others: one stray run moved into a folder must not hide its history."""
    clusters: list[list[Entry]] = []
    for entry in entries:
        for cluster in clusters:
            if not runs.environment_differences(cluster[0].run.environment,
                                                entry.run.environment):
                cluster.append(entry)
                break
        else:
            clusters.append([entry])
    best = max(clusters, key=lambda c: (len(c), c[-1].number))
    return best, [e for e in entries if all(e is not k for k in best)]


def read_environment(folder: Path, slug_: str, *, alpha: float) -> Environment:
    env = Environment(folder, slug_)
    entries: list[Entry] = []
    for path in runs.list_runs(folder):
        try:
            entries.append(load_entry(path))
        except UserError as exc:
            env.problems.append(f"{path.name}: left out: {exc}")
    if not entries:
        env.problems.append(f"{folder}: no run could be read")
        return env
    kept, others = _one_environment(entries)
    for entry in others:
        differences = runs.environment_differences(entry.run.environment,
                                                   kept[-1].run.environment)
        env.problems.append(f"run {entry.number:04d}: left out: measured in another "
                            f"environment than the folder's other runs "
                            f"({'; '.join(differences)})")
    newest = kept[-1]
    env.title, env.facts = newest.run.title, _facts(newest.run)
    for entry in kept:
        code = runs.code_of(entry.run)
        commit = (code.commit[:8] + ("+dirty" if code.dirty else "")) if code.commit else None
        env.runs.append(RunInfo(entry.number, entry.run.datetime, commit,
                                _injected_words(entry.run), entry.run.source))
    try:
        env.history = history_of(folder, kept)
    except UserError as exc:
        env.problems.append(str(exc))
        return env
    if len(kept) >= MIN_RUNS:
        env.judged = judge_history(env.history, alpha=alpha)
        env.changes = change_events(env.judged)
    judged = env.judged.results if env.judged else [None] * len(env.history.series)
    injected = frozenset(e.number for e in kept if runs.injected_slowdowns(e.run))
    slugs = _unique_slugs([s.name for s in env.history.series])
    for series, result, page in zip(env.history.series, judged, slugs, strict=True):
        work, memory = {}, {}
        for entry in kept:
            bench = entry.run.benchmarks.get(series.key)
            if bench is None:
                continue
            if (counted := _work(bench)) is not None:
                work[entry.number] = counted
            added = bench.extra_info.get("peak_memory_added_bytes")
            if isinstance(added, (int, float)):
                memory[entry.number] = int(added)
        env.benchmarks.append(Benchmark(series, page, result, work, memory, injected))
    return env


def _cause(changed: list[bool | None]) -> str:
    if any(c is None for c in changed):
        return "no commit recorded around it"
    if any(changed):
        return "the code changed here"
    return "same code on both sides: the machine moved"


def change_events(result: HistoryResult) -> list[ChangeEvent]:
    """Every run where some benchmark's level shifted, newest first."""
    at: dict[int, list[tuple[SeriesResult, object]]] = {}
    for r in result.results:
        for shift in r.shifts:
            at.setdefault(r.shift_run(shift), []).append((r, shift))
    together = {}
    if result.machine is not None:
        for shift in result.machine.shifts:
            run = result.machine.shift_run(shift)
            together[run] = (shift.ratio, result.control_move(shift))
            at.setdefault(run, [])
    events = []
    for run in sorted(at, reverse=True):
        found = at[run]
        commit = next((r.shift_commit(s) for r, s in found if r.shift_commit(s)), None)
        if commit is None and result.machine is not None and run in together:
            commit = next((p.commit for p in result.machine.series.points if p.run == run), None)
        cause = _cause([r.code_changed(s) for r, s in found]) if found else (
            "all benchmarks together")
        ratio, control = together.get(run, (None, None))
        events.append(ChangeEvent(run, commit, tuple((r.series.name, s.ratio)
                                                     for r, s in found), cause, ratio, control))
    return events


def read_environments(baselines: Path, *, alpha: float) -> list[Environment]:
    folders = environment_folders(baselines)
    names = _unique_slugs([f.name for f in folders])
    return [read_environment(f, name, alpha=alpha) for f, name in zip(folders, names, strict=True)]


def _one_run(folder: Path) -> runs.Run:
    found = sorted(folder.glob("**/*.json"))
    if len(found) != 1:
        raise UserError(f"{folder} holds {len(found)} runs, not one")
    return runs.load_run(found[0])


def read_kept_ab(folder: Path) -> KeptAB:
    """A folder `llmbench ab --keep` wrote (baseline/ and candidate/ runs, pairing.json)."""
    try:
        if not (folder / "pairing.json").is_file():
            raise UserError("no pairing.json: not a folder `llmbench ab --keep` wrote")
        base, cand = _one_run(folder / "baseline"), _one_run(folder / "candidate")
        if not base.paired_with(cand):
            raise UserError("its two runs were not paired with each other")
        return KeptAB(folder, slug(folder.name), base, cand)
    except UserError as exc:
        return KeptAB(folder, slug(folder.name), None, None, f"{folder}: {exc}")
