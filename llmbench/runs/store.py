"""Saved runs: the environment record that makes runs comparable, atomic storage, and
reading runs back for the gate.

A run is pytest-benchmark's JSON with an `llmbench` section added. Runs live in one folder
per environment (model, device, dtype) under `baselines/`, so that runs of different
environments cannot be compared by accident. `load_run` turns a file (or a folder: its
newest run) into a `Run` of raw per-round samples, or raises one `RunError` line that says
what is wrong; `environment_differences` says why two runs are not comparable (library
versions never count: comparing an upgrade is a main use); `latest_comparable` is the one
definition of "the latest run to compare with", for the pytest gate's `--compare-to=latest`
and `llmbench report --baseline latest` alike; `pool_runs` joins A/B blocks of one side.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from llmbench.errors import UserError

BASELINES_DIR = "baselines"
LATEST = "latest"  # names the latest comparable run wherever a baseline run is asked for
# Fields of pytest-benchmark's machine_info that change from run to run on the same machine
# and would make every comparison warn.
VOLATILE_CPU_FIELDS = ("hz_actual", "hz_actual_friendly", "hz_advertised",
                       "hz_advertised_friendly", "l2_cache_associativity")


def environment_key(model: str, device: str, dtype: str) -> str:
    """The folder name for one environment, e.g. `smollm2-135m-cpu-float32`."""
    safe_model = re.sub(r"[^A-Za-z0-9._@-]+", "_", model).strip("_")
    return f"{safe_model}-{device}-{dtype}"


def library_versions() -> dict[str, str]:
    import importlib.metadata as md

    versions = {"python": platform.python_version()}
    for package in ("torch", "transformers", "llmbench", "pytest-benchmark"):
        try:
            versions[package] = md.version(package)
        except md.PackageNotFoundError:
            versions[package] = "absent"
    return versions


def strip_volatile(machine_info: dict) -> None:
    """Drop clock-speed fields in place (they drift with load and turbo state)."""
    cpu = machine_info.get("cpu")
    if isinstance(cpu, dict):
        for name in VOLATILE_CPU_FIELDS:
            cpu.pop(name, None)


def write_new_json(path: Path, payload: dict) -> None:
    """Write `payload` to `path` atomically, refusing to replace an existing file.

    The JSON goes to a temporary file in the same folder, then is hard-linked into place:
    a link fails if the name exists, so two writers never clobber each other, and a reader
    never sees half a file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=2, sort_keys=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.link(tmp, path)
    finally:
        os.unlink(tmp)


def save_numbered(folder: Path, payload: dict, label: str) -> Path:
    """Save `payload` as the next `NNNN_<label>.json` in `folder`; never overwrites."""
    safe_label = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_") or "run"
    for _ in range(1000):
        numbers = [int(m.group(1)) for p in folder.glob("*.json")
                   if (m := re.match(r"(\d{4,})_", p.name))] if folder.exists() else []
        path = folder / f"{max(numbers, default=0) + 1:04d}_{safe_label}.json"
        try:
            write_new_json(path, payload)
            return path
        except FileExistsError:
            continue  # another run took this number meanwhile; take the next
    raise RuntimeError(f"could not find a free run number in {folder}")


# --- Reading runs back ---------------------------------------------------------------------

# What makes two runs comparable at all. Library versions are deliberately absent: comparing
# a torch or transformers upgrade is a main use, so they are shown, not enforced.
MATCHED_FIELDS = ("model", "fingerprint", "device", "device_name", "dtype", "threads")
_SAMPLES_HINT = ("llmbench's pytest suite saves them in every run under --baseline-dir; "
                 "with plain pytest-benchmark, pass --benchmark-save-data (with "
                 "--benchmark-save or --benchmark-autosave) or use --benchmark-json")
_RUN_NAME = re.compile(r"(\d{4,})_.*\.json$")


class RunError(UserError):
    """A run file that cannot be compared: missing, not JSON, or without raw samples."""


class EnvironmentMismatch(UserError):
    """Two runs from different environments; `differences` lists them, one per line."""

    def __init__(self, differences: list[str]):
        self.differences = list(differences)
        super().__init__("runs come from different environments: " + "; ".join(differences)
                         + " (pass --allow-mismatch to compare anyway)")


@dataclass(frozen=True)
class Benchmark:
    """One benchmark of a run: its raw per-round timings in seconds."""

    key: str  # pytest's fullname, unique within a run
    name: str
    group: str | None
    samples: tuple[float, ...]
    extra_info: Mapping = field(default_factory=dict)
    # Rounds of each pooled run, in order (A/B blocks); () for a single run. Rounds of one
    # block share its moment on the machine, so the gate judges blocks, not rounds.
    blocks: tuple[int, ...] = ()


@dataclass(frozen=True)
class Run:
    """A saved run as the gate needs it. `source` names it in messages (a path, or a label
    for a run that was never written)."""

    source: str
    benchmarks: Mapping[str, Benchmark]  # by key, in the file's order
    environment: Mapping | None  # None: not an llmbench run (no `llmbench` section)
    control_s: tuple[float, ...] = ()
    info: Mapping = field(default_factory=dict)  # the whole `llmbench` section
    commit_info: Mapping = field(default_factory=dict)
    datetime: str | None = None

    @property
    def device(self) -> str | None:
        return (self.environment or {}).get("device")


def run_from_json(data, source: str) -> Run:
    """Validate pytest-benchmark JSON (already parsed) into a `Run`; `RunError` if unusable."""
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise RunError(f"{source} is not a pytest-benchmark run: no 'benchmarks' list")
    if not data["benchmarks"]:
        raise RunError(f"{source} holds no benchmarks: the run measured nothing")
    benchmarks: dict[str, Benchmark] = {}
    without_samples = []
    for entry in data["benchmarks"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("stats"), dict):
            raise RunError(f"{source} is not a pytest-benchmark run: a benchmark has no stats")
        key = entry.get("fullname") or entry.get("name")
        if not isinstance(key, str) or not key:
            raise RunError(f"{source}: a benchmark has neither fullname nor name")
        if key in benchmarks:
            raise RunError(f"{source}: benchmark {key!r} appears twice")
        samples = entry["stats"].get("data")
        if not samples:
            without_samples.append(key)
            continue
        try:
            values = tuple(float(x) for x in samples)
        except (TypeError, ValueError):
            raise RunError(f"{source}: {key!r} has non-numeric samples") from None
        if not all(math.isfinite(x) and x > 0 for x in values):
            raise RunError(f"{source}: {key!r} has samples that are not positive finite "
                           "seconds; the file is damaged")
        benchmarks[key] = Benchmark(key=key, name=entry.get("name") or key,
                                    group=entry.get("group"), samples=values,
                                    extra_info=dict(entry.get("extra_info") or {}))
    if without_samples:
        raise RunError(f"{source} has no raw per-round samples (stats.data) for "
                       f"{len(without_samples)} of {len(data['benchmarks'])} benchmarks, so "
                       f"no test can be run on it: {_SAMPLES_HINT}")
    section = data.get("llmbench") if isinstance(data.get("llmbench"), dict) else {}
    environment = section.get("environment")
    control = section.get("control_s") or ()
    return Run(source=source, benchmarks=benchmarks,
               environment=dict(environment) if isinstance(environment, dict) else None,
               control_s=tuple(float(x) for x in control), info=section,
               commit_info=dict(data.get("commit_info") or {}), datetime=data.get("datetime"))


def load_run(path: str | os.PathLike) -> Run:
    """Read a run file, or the newest run in a folder; every failure is one `RunError` line."""
    p = Path(path)
    if p.is_dir():
        newest = latest_run(p)
        if newest is None:
            folders = sorted(d.name for d in p.iterdir() if d.is_dir() and list_runs(d))
            hint = (f": pass one of its environment folders ({', '.join(folders)})"
                    if folders else "")
            raise RunError(f"{p} holds no numbered runs (NNNN_*.json){hint}")
        p = newest
    return run_from_json(read_json(p), str(p))


def read_json(path: Path):
    """A saved run's parsed JSON; a missing, unreadable or damaged file is one RunError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunError(f"no such run file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RunError(f"cannot read {path}: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        what = "truncated" if exc.pos >= len(text.rstrip()) else "invalid"
        raise RunError(f"{path} is {what} JSON ({exc.msg} at line {exc.lineno}, column "
                       f"{exc.colno}): re-run the benchmarks to replace it") from None


def run_number(path: Path) -> int | None:
    m = _RUN_NAME.match(path.name)
    return int(m.group(1)) if m else None


def list_runs(folder: str | os.PathLike) -> list[Path]:
    """The numbered runs in `folder`, oldest first (by number, the order they were saved)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    runs = [p for p in folder.iterdir() if p.is_file() and run_number(p) is not None]
    return sorted(runs, key=lambda p: (run_number(p), p.name))


def latest_run(folder: str | os.PathLike, environment: Mapping | None = None,
               exclude: Sequence[str | os.PathLike] = ()) -> Path | None:
    """The newest run in `folder`, skipping `exclude`; with `environment`, the newest whose
    environment matches it (unreadable runs are skipped then). None if there is none."""
    skip = {Path(p).resolve() for p in exclude}
    for path in reversed(list_runs(folder)):
        if path.resolve() in skip:
            continue
        if environment is None:
            return path
        try:
            run = load_run(path)
        except RunError:
            continue
        if not environment_differences(run.environment, environment):
            return path
    return None


class NoBaseline(LookupError):
    """No other run of this environment to compare with: a plain fact (every environment's
    first run meets it), said in one line, never an error."""


def latest_comparable(folder: str | os.PathLike, environment: Mapping | None,
                      exclude: Sequence[str | os.PathLike] = ()) -> Path:
    """The run to compare a run of `environment` with: the newest run in `folder` with the
    same environment (model, fingerprint, device and CPU or GPU name, dtype, threads), other
    than `exclude`. A run from another machine never qualifies. `NoBaseline` says why there
    is none."""
    folder = Path(folder)
    if environment is None:
        raise NoBaseline("the run has no llmbench environment record, so no saved run can be "
                         "matched to it")
    path = latest_run(folder, environment=environment, exclude=exclude)
    if path is not None:
        return path
    skip = {Path(p).resolve() for p in exclude}
    others = sum(p.resolve() not in skip for p in list_runs(folder))
    runs = f"{others} other run{'' if others == 1 else 's'}"
    raise NoBaseline(f"{folder} holds {runs}, none of this environment" if others
                     else f"{folder} holds no other run")


def is_same_run(a: Run, b: Run) -> bool:
    """Whether two loaded runs are one run (the same file, a copy, or the same path spelled
    twice): every benchmark they share has identical samples. Two separate runs never agree
    to the nanosecond on every round of every benchmark."""
    common = [k for k in a.benchmarks if k in b.benchmarks]
    return bool(common) and all(a.benchmarks[k].samples == b.benchmarks[k].samples
                                for k in common)


def environment_differences(baseline: Mapping | None, candidate: Mapping | None) -> list[str]:
    """What makes two environments incomparable, one readable item each; [] if they match."""
    if baseline is None or candidate is None:
        which = [side for side, env in (("baseline", baseline), ("candidate", candidate))
                 if env is None]
        return [f"no llmbench environment record in the {' and '.join(which)} run"]
    out = []
    for name in MATCHED_FIELDS:
        a, b = baseline.get(name), candidate.get(name)
        if a == b:
            continue
        if name == "fingerprint" and isinstance(a, dict) and isinstance(b, dict):
            keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            out.append(f"model fingerprint differs in {', '.join(keys)}")
        elif name == "fingerprint":
            out.append("model fingerprint missing on one side")
        else:
            out.append(f"{name} {a!r} vs {b!r}")
    return out


def version_differences(baseline: Mapping | None, candidate: Mapping | None
                        ) -> dict[str, tuple[str | None, str | None]]:
    """Library versions that differ: {package: (baseline, candidate)}. Allowed, only shown."""
    a = (baseline or {}).get("versions") or {}
    b = (candidate or {}).get("versions") or {}
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def pool_runs(runs: Sequence[Run], source: str) -> Run:
    """One run from several of the same code and environment (A/B blocks): samples and
    control samples concatenated per benchmark, with each run's rounds kept as a block;
    only benchmarks present in every run."""
    assert runs, "nothing to pool"
    first = runs[0]
    for run in runs[1:]:
        if diffs := environment_differences(first.environment, run.environment):
            raise EnvironmentMismatch(diffs)
    keys = [k for k in first.benchmarks if all(k in r.benchmarks for r in runs)]
    pooled = {k: dataclasses.replace(
        first.benchmarks[k],
        samples=tuple(x for r in runs for x in r.benchmarks[k].samples),
        blocks=tuple(n for r in runs for n in (r.benchmarks[k].blocks
                                               or (len(r.benchmarks[k].samples),))))
        for k in keys}
    return Run(source=source, benchmarks=pooled, environment=first.environment,
               control_s=tuple(x for r in runs for x in r.control_s), info=first.info,
               commit_info=first.commit_info, datetime=first.datetime)
