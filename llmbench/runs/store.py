"""Saved runs on disk: reading a run back, the one atomic writer, numbering, and finding the
latest comparable run.

Runs live in one folder per environment (model, device, dtype) under `baselines/`, named
`NNNN_<label>.json` in the order they were saved. `load_run` turns a file, or a folder (its
newest run), into a `Run` (`model`), or raises one `RunError` line that says what is wrong.
`write_atomic` is how anything of ours reaches disk, runs and reports alike: a reader never
sees half a file, and nothing is replaced unless asked. `latest_comparable` is the one
definition of "the latest run to compare with", for the pytest gate's `--compare-to=latest`
and `llmbench report --baseline latest` alike.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

from llmbench.runs.environment import environment_differences
from llmbench.runs.model import Run, RunError, run_from_json

BASELINES_DIR = "baselines"
LATEST = "latest"  # names the latest comparable run wherever a baseline run is asked for
_RUN_NAME = re.compile(r"(\d{4,})_.*\.json$")


class DamagedRunSkipped(UserWarning):
    """A saved run that could not be read was left out of a search or a history: a warning,
    so that a search goes on past it and every front end can name it (the CLI prints it in
    one line, the pytest gate in its summary)."""


def _left_out(exc: RunError) -> None:
    warnings.warn(DamagedRunSkipped(f"left out a damaged run: {exc}"), stacklevel=3)


class NoBaseline(LookupError):
    """No other run of this environment to compare with: a plain fact (every environment's
    first run meets it), said in one line, never an error."""


def _umask() -> int:
    """The process's umask (reading it means setting it: set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, text: str, *, replace: bool = False) -> None:
    """Write `text` to `path` atomically; without `replace`, refuse an existing file.

    The text goes to a temporary file in the same folder, then into place: hard-linked when
    nothing may be replaced (a link fails if the name exists, so two writers never clobber
    each other), renamed over the old file when `replace`. A reader never sees half a file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp makes the file owner-only; a saved run or report is shared (a team's
        # baselines folder, a CI artifact), so give it what open() would under the umask.
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_new_json(path: Path, payload: dict) -> None:
    """Write `payload` as JSON to `path` atomically, refusing to replace an existing file."""
    write_atomic(path, json.dumps(payload, indent=2))


def save_numbered(folder: Path, payload: dict, label: str) -> Path:
    """Save `payload` as the next `NNNN_<label>.json` in `folder`; never overwrites, and the
    number is unique in the folder whatever the label: taking the next number and writing
    the file happen under an exclusive lock on the folder (`_numbering`), so processes
    saving at once, with labels of other commits or other seconds, never share one."""
    safe_label = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_") or "run"
    folder.mkdir(parents=True, exist_ok=True)
    with _numbering(folder):
        for _ in range(1000):
            path = folder / run_file_name(next_number(folder), safe_label)
            try:
                write_new_json(path, payload)
                return path
            except FileExistsError:
                continue  # a writer without the lock (an older llmbench) took it: the next
    raise RuntimeError(f"could not find a free run number in {folder}")


def next_number(folder: Path) -> int:
    """The number the next run saved in `folder` takes: one past the highest there (1 when
    there is none, or no folder)."""
    if not folder.is_dir():
        return 1
    return max((n for p in folder.iterdir() if (n := run_number(p)) is not None), default=0) + 1


def run_file_name(number: int, label: str) -> str:
    return f"{number:04d}_{label}.json"


class _numbering:
    """An exclusive lock on a folder's numbering: `flock` on its `.llmbench-numbering`
    file (released by the kernel if the process dies). Where there is no `fcntl`, no lock:
    the hard link in `write_atomic` still never overwrites."""

    def __init__(self, folder: Path):
        self.path = folder / ".llmbench-numbering"
        self.fd: int | None = None

    def __enter__(self):
        try:
            import fcntl
        except ImportError:
            return self
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666 & ~_umask())
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing releases the lock
            self.fd = None


def check_writable(folder: str | os.PathLike) -> None:
    """Refuse, in one `RunError` line, a folder runs cannot be saved in: before the first
    benchmark runs, so that no measured run is lost at the end (the caller adds which flag
    to change). Creates nothing: a file is made and removed in the folder, or in its
    nearest existing parent when the folder is yet to be made."""
    folder = Path(folder)
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise RunError(f"cannot save runs in {folder}: {existing} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".llmbench-write-check-")
    except OSError as exc:
        raise RunError(f"cannot save runs in {folder}: {exc.strerror or exc} in {existing}"
                       ) from None
    os.close(fd)
    os.unlink(probe)


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
    except RecursionError:  # arrays or objects nested deeper than any run writes
        raise RunError(f"{path} is damaged: its JSON nests deeper than Python reads; "
                       "re-run the benchmarks to replace it") from None
    except ValueError as exc:  # an integer of thousands of digits
        raise RunError(f"{path} is damaged: {exc}; re-run the benchmarks to replace it"
                       ) from None


def resolve_run(path: str | os.PathLike) -> Path:
    """The run file `path` names: itself, or a folder's newest numbered run."""
    p = Path(path)
    if not p.is_dir():
        return p
    newest = latest_run(p)
    if newest is None:
        folders = sorted(d.name for d in p.iterdir() if d.is_dir() and list_runs(d))
        hint = (f": pass one of its environment folders ({', '.join(folders)})"
                if folders else "")
        raise RunError(f"{p} holds no numbered runs (NNNN_*.json){hint}")
    return newest


def load_run(path: str | os.PathLike, *, samples: bool = True, summary: bool = False) -> Run:
    """Read a run file, or the newest run in a folder; every failure is one `RunError` line.
    `samples` and `summary` say what the reader requires (`model.run_from_json`)."""
    p = resolve_run(path)
    return run_from_json(read_json(p), str(p), path=p, samples=samples, summary=summary)


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
    environment matches it (an unreadable run is left out then, and named: a
    `DamagedRunSkipped` warning). None if there is none."""
    skip = {Path(p).resolve() for p in exclude}
    for path in reversed(list_runs(folder)):
        if path.resolve() in skip:
            continue
        if environment is None:
            return path
        try:
            run = load_run(path)
        except RunError as exc:
            _left_out(exc)
            continue
        if not environment_differences(run.environment, environment):
            return path
    return None


def environment_runs(folder: str | os.PathLike, environment: Mapping | None,
                     exclude: Sequence[str | os.PathLike] = ()) -> list[Run]:
    """Every readable run in `folder` of `environment`, oldest first, other than `exclude`:
    what the gate learns this environment's noise between runs from. An unreadable run is
    left out and named (a `DamagedRunSkipped` warning; it is refused by name wherever it
    is asked for itself)."""
    if environment is None:
        return []
    skip = {Path(p).resolve() for p in exclude}
    found = []
    for path in list_runs(folder):
        if path.resolve() in skip:
            continue
        try:
            run = load_run(path)
        except RunError as exc:
            _left_out(exc)
            continue
        if not environment_differences(run.environment, environment):
            found.append(run)
    return found


def saved_history(baseline: Run, candidate: Run | None = None) -> list[Run]:
    """The saved runs of a baseline's environment in its folder, where a stored comparison
    learns the noise between runs; [] for a run that was never saved. The candidate is left
    out: it is what is being judged (and was not saved yet when the suite judged it). So are
    runs made after it: a saved run is judged later (`llmbench compare`, `report`) against
    the noise the suite knew when it judged it, so both give the same verdicts."""
    if baseline.path is None:
        return []
    exclude = [candidate.path] if candidate is not None and candidate.path else []
    found = environment_runs(baseline.path.parent, baseline.environment, exclude=exclude)
    made = _moment(candidate.datetime) if candidate is not None else None
    if made is None:
        return found
    return [run for run in found if (when := _moment(run.datetime)) is None or when <= made]


def _moment(stamp: str | None) -> datetime.datetime | None:
    """A run's pytest-benchmark datetime as an aware moment; None if it has none readable."""
    try:
        moment = datetime.datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


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
    others = [p for p in list_runs(folder) if p.resolve() not in skip]
    if not others:
        raise NoBaseline(f"{folder} holds no other run")
    runs = f"{len(others)} other run{'' if len(others) == 1 else 's'}"
    raise NoBaseline(f"{folder} holds {runs}, none of this environment"
                     + _newest_differs(others[-1], environment))


def _newest_differs(path: Path, environment: Mapping) -> str:
    """How the newest other run differs, so that a user sees why it is not a baseline."""
    try:
        differences = environment_differences(load_run(path).environment, environment)
    except RunError:
        return ""
    return f" (the newest, {path.name}, differs: {'; '.join(differences)})"
