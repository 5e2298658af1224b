"""What the dashboard shows, read from saved runs: one `Environment` per environment found in
each folder of runs, each benchmark's series with its history verdict, counted work and
peak memory, the change points of the history, and the kept paired A/Bs.

Reading never stops at a bad file. A damaged or truncated run, one of a newer format, or one
that is no llmbench run is left out with a one-line `problem` the page prints. A folder
holding runs of several environments (a machine changed, a run moved in) shows each as an
environment of its own, so no run hides another's history. Only a baselines folder with no
run anywhere is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePath, PurePosixPath

from llmbench import runs
from llmbench.errors import UserError
from llmbench.gate.memory import FIRST_PER_CASE_FORMAT
from llmbench.gate.work import SIZES, counts_of, size_of
from llmbench.history import MIN_RUNS, HistoryResult, SeriesResult, judge_history
from llmbench.history.series import Entry, History, Series, entry_of, history_of


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
    older_format: bool  # saved before peak memory was recorded per case
    testbed: str = ""  # the machine, as a person names it (`runs.testbed.label`)
    testbed_id: str = ""  # under the fields chosen now: runs of one id are one kind of machine


@dataclass(frozen=True)
class ChangeEvent:
    """Change points of several benchmarks at one run: what moved there, and whether the
    code or the machine moved it (as `llmbench history` decides)."""

    run: int
    commit: str | None
    moved: tuple[tuple[str, float], ...]  # (benchmark, ratio after/before)
    cause: str
    together: float | None = None  # all benchmarks together, when they shifted here
    control: float | None = None  # the control workload across that shift


@dataclass
class Environment:
    folder: PurePath  # its folder of runs; in a database, its environment key
    slug: str
    title: str = ""
    facts: dict[str, str] = field(default_factory=dict)
    runs: list[RunInfo] = field(default_factory=list)
    benchmarks: list[Benchmark] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    injected: frozenset[int] = frozenset()  # run numbers that ran an injected slowdown
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


# --- File names ------------------------------------------------------------------------------

_RESERVED = re.compile(r"^(con|prn|aux|nul|com\d|lpt\d)$", re.I)  # no such file on Windows


def slug(text: str) -> str:
    """A file name for `text`: letters, digits, '-', '_' and '.', the rest as '-'; never
    hidden (a leading '.') nor a name Windows reserves."""
    out = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "x"
    return f"_{out}" if _RESERVED.match(out.split(".")[0]) else out


class Names:
    """File names handed out within one folder: each unique, case-insensitively (macOS and
    Windows file systems fold case), so no page overwrites another."""

    def __init__(self, reserved: tuple[str, ...] = ()):
        self._used = {name.lower() for name in reserved}

    def take(self, text: str) -> str:
        base = candidate = slug(text)
        n = 1
        while candidate.lower() in self._used:
            n += 1
            candidate = f"{base}-{n}"
        self._used.add(candidate.lower())
        return candidate


# --- Reading runs ----------------------------------------------------------------------------

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


def _work(bench: runs.Benchmark) -> Work | None:
    counts = counts_of(bench.extra_info)
    if isinstance(counts, str):
        return Work(not_counted=counts)
    if not counts:
        return None
    try:
        return Work(tuple((shown, size_of(counts, key)) for key, shown in SIZES))
    except (TypeError, ValueError):
        return Work(not_counted="its counts are damaged")


def _memory(bench: runs.Benchmark) -> int | None:
    added = bench.extra_info.get("peak_memory_added_bytes")
    if isinstance(added, bool) or not isinstance(added, (int, float)) or not added >= 0:
        return None
    return int(added)


def _read(store: runs.Store, environment_key: str) -> tuple[list[Entry], list[str]]:
    """Every run of one environment of `store` that can be read, oldest first, and a line
    for each other."""
    entries, problems = [], []
    refs = store.refs(environment_key)
    try:
        loaded: list = store.load_many(refs)  # a database: one query, not one a run
    except (TypeError, ValueError, KeyError, AttributeError):
        loaded = [None] * len(refs)  # damage not foreseen in one of them: read each alone
    for ref, run in zip(refs, loaded, strict=True):
        name = f"{ref.number:04d}_{ref.label}" + ("" if store.is_database else ".json")
        try:
            if isinstance(run, UserError):
                raise run
            entry = entry_of(run if run is not None else store.load(ref), ref.number,
                             ref.address)
        except UserError as exc:
            problems.append(f"{name}: left out: {exc}")
            continue
        except (TypeError, ValueError, KeyError, AttributeError) as exc:  # damage not foreseen
            problems.append(f"{name}: left out: damaged ({type(exc).__name__}: {exc})")
            continue
        if entry.run.environment is None:
            problems.append(f"{name}: left out: not an llmbench run (no environment "
                            "recorded)")
            continue
        entries.append(entry)
    return entries, problems


def _by_environment(entries: list[Entry]) -> list[list[Entry]]:
    """The runs grouped by environment, each group oldest first, the group holding the
    newest run first."""
    groups: list[list[Entry]] = []
    for entry in entries:
        for group in groups:
            if not runs.environment_differences(group[0].run.environment,
                                                entry.run.environment):
                group.append(entry)
                break
        else:
            groups.append([entry])
    return sorted(groups, key=lambda g: -g[-1].number)


def _run_info(entry: Entry) -> RunInfo:
    code = runs.code_of(entry.run)
    commit = (code.commit[:8] + ("+dirty" if code.dirty else "")) if code.commit else None
    slowed = ", ".join(f"{name} x{1 + factor:g}" for name, factor in code.injected)
    when = entry.run.datetime if isinstance(entry.run.datetime, str) else None
    bed = entry.run.testbed
    return RunInfo(entry.number, when, commit, slowed, entry.run.source,
                   entry.run.info.get("format", 1) < FIRST_PER_CASE_FORMAT,
                   runs.testbed.label(bed),
                   runs.testbed.testbed_id(bed, runs.testbed.chosen_fields()) if bed else "")


def _benchmarks(env: Environment, kept: list[Entry]) -> None:
    judged = env.judged.results if env.judged else [None] * len(env.history.series)
    names = Names()
    newer = {e.number for e in kept if e.run.info.get("format", 1) >= FIRST_PER_CASE_FORMAT}
    for series, result in zip(env.history.series, judged, strict=True):
        work, memory = {}, {}
        for entry in kept:
            bench = entry.run.benchmarks.get(series.key)
            if bench is None:
                continue
            if (counted := _work(bench)) is not None:
                work[entry.number] = counted
            # Format 1 recorded the process's peak under the same name: not the case's own.
            if entry.number in newer and (added := _memory(bench)) is not None:
                memory[entry.number] = added
        env.benchmarks.append(Benchmark(series, names.take(series.name), result, work, memory))


def _environment(folder: PurePath, slug_: str, kept: list[Entry], alpha: float) -> Environment:
    env = Environment(folder, slug_, title=kept[-1].run.title, facts=_facts(kept[-1].run))
    env.runs = [_run_info(e) for e in kept]
    env.injected = frozenset(e.number for e in kept if runs.injected_slowdowns(e.run))
    try:
        env.history = history_of(folder, kept, every_benchmark=True)
    except UserError as exc:
        env.problems.append(str(exc))
        return env
    if len(kept) >= MIN_RUNS:
        env.judged = judge_history(env.history, alpha=alpha)
        env.changes = change_events(env.judged)
    _benchmarks(env, kept)
    return env


def read_environment(store: runs.Store, environment_key: str, folder: PurePath,
                     names: Names, *, alpha: float) -> list[Environment]:
    """The environments of one environment key of a store (a folder of runs): one, or one
    per environment its runs were measured in (the one holding the newest run first).
    `folder` is what the pages call it: the folder, or the key in a database."""
    entries, problems = _read(store, environment_key)
    if not entries:
        return [Environment(folder, names.take(folder.name),
                            problems=[*problems, f"{folder}: no run could be read"])]
    groups = _by_environment(entries)
    environments = [_environment(folder, names.take(folder.name), group, alpha)
                    for group in groups]
    if len(groups) > 1:
        problems.append(f"{folder} holds runs of {len(groups)} environments (a machine or an "
                        "option changed, or a run was moved in); each is shown on its own")
    environments[0].problems[:0] = problems
    return environments


def read_folder(folder: Path, names: Names, *, alpha: float) -> list[Environment]:
    """The environments of one folder of runs (`read_environment`)."""
    return read_environment(runs.FolderStore(folder.parent), folder.name, folder, names,
                            alpha=alpha)


def read_environments(baselines: Path | str, *, alpha: float) -> list[Environment]:
    """Every environment of a baselines folder, or of a database store (its URL)."""
    names = Names(reserved=("ab",))  # the A/B pages' folder
    if runs.is_database_url(str(baselines)):
        store = runs.open_store(str(baselines))
        keys = store.environment_keys()
        if not keys:
            raise UserError(f"{store.name} holds no saved runs: run `pytest --benchmark-only "
                            f"--store {store.name}` first")
        return [env for key in keys for env in read_environment(
            store, key, PurePosixPath(key), names, alpha=alpha)]
    return [env for folder in environment_folders(Path(baselines))
            for env in read_folder(folder, names, alpha=alpha)]


# --- One benchmark across testbeds ---------------------------------------------------------------

@dataclass(frozen=True)
class Line:
    """One benchmark's runs on one kind of machine: an environment's runs of one testbed."""

    environment: str  # the environment's title
    env_slug: str
    testbed: str  # the testbed's label
    points: tuple[tuple[str | None, float], ...]  # (when, median seconds), oldest first

    @property
    def newest_s(self) -> float:
        return self.points[-1][1]


@dataclass(frozen=True)
class Across:
    """One benchmark (by the name a reader knows) on every testbed that measured it."""

    name: str
    slug: str
    lines: tuple[Line, ...]  # fastest newest median first


def across_testbeds(environments: list[Environment]) -> list[Across]:
    """Each benchmark measured on two or more kinds of machine (environments, or testbeds
    within one), its runs split by them: the dashboard's view of one benchmark across a
    team's machines."""
    found: dict[str, list[Line]] = {}
    for env in environments:
        info = {r.number: r for r in env.runs}
        for bench in env.benchmarks:
            by_bed: dict[str, list] = {}
            for point in bench.series.points:
                run = info.get(point.run)
                key = run.testbed_id if run else ""
                by_bed.setdefault(key, []).append((run, point))
            for taken in by_bed.values():
                run = taken[-1][0]
                found.setdefault(bench.name, []).append(Line(
                    env.title or str(env.folder), env.slug,
                    run.testbed if run else runs.testbed.label(None),
                    tuple((r.when if r else None, p.median_s) for r, p in taken)))
    names = Names()
    return [Across(name, names.take(name), tuple(sorted(lines, key=lambda x: x.newest_s)))
            for name, lines in sorted(found.items()) if len(lines) >= 2]


# --- Change points across the history ----------------------------------------------------------

def _cause(changed: list[bool | None]) -> str:
    if any(c is None for c in changed):
        return "no clean commit recorded around it: cannot tell code from machine"
    if any(changed):
        return "the code changed here"
    return "same code on both sides: the machine moved"


def change_events(result: HistoryResult) -> list[ChangeEvent]:
    """Every run where some benchmark's level shifted, newest first, with what moved and
    why, as `llmbench history` decides it."""
    at: dict[int, list[tuple[SeriesResult, object]]] = {}
    judged = [*result.results, *([result.machine] if result.machine else [])]
    for r in judged:
        for shift in r.shifts:
            at.setdefault(r.shift_run(shift), []).append((r, shift))
    events = []
    for run in sorted(at, reverse=True):
        found = at[run]
        commit = next((r.shift_commit(s) for r, s in found if r.shift_commit(s)), None)
        together = [(r, s) for r, s in found if r is result.machine]
        ratio = together[0][1].ratio if together else None
        control = result.control_move(together[0][1]) if together else None
        events.append(ChangeEvent(
            run, commit, tuple((r.series.name, s.ratio) for r, s in found
                               if r is not result.machine),
            _cause([r.code_changed(s) for r, s in found]), ratio, control))
    return events


# --- Kept paired A/Bs --------------------------------------------------------------------------

def _one_run(folder: Path) -> runs.Run:
    found = sorted(folder.glob("**/*.json"))
    if len(found) != 1:
        raise UserError(f"{folder} holds {len(found)} runs, not one")
    return runs.load_run(found[0])


def read_kept_ab(folder: Path, names: Names) -> KeptAB:
    """A folder `llmbench ab --keep` wrote (baseline/ and candidate/ runs, pairing.json)."""
    name = names.take(folder.name)
    try:
        if not (folder / "pairing.json").is_file():
            raise UserError("no pairing.json: not a paired A/B kept by `llmbench ab --keep`")
        base, cand = _one_run(folder / "baseline"), _one_run(folder / "candidate")
        if not base.paired_with(cand):
            raise UserError("its two runs were not paired with each other")
        return KeptAB(folder, name, base, cand)
    except UserError as exc:
        return KeptAB(folder, name, None, None, f"{folder}: {exc}")
