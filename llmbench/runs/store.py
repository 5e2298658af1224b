"""Saved runs on disk, the default store: reading a run back, the one atomic writer,
numbering, and the folder store (`FolderStore`) that `location` searches.

Runs live in one folder per environment (model, device, dtype) under `baselines/`, named
`NNNN_<label>.json` in the order they were saved. `load_run` turns a file, or a folder (its
newest run), into a `Run` (`model`), or raises one `RunError` line that says what is wrong.
`write_atomic` is how anything of ours reaches disk, runs and reports alike: a reader never
sees half a file, and nothing is replaced unless asked.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import warnings
from pathlib import Path

from llmbench.runs.model import Run, RunError, RunRef, run_from_json

BASELINES_DIR = "baselines"
LATEST = "latest"  # names the latest comparable run wherever a baseline run is asked for
_RUN_NAME = re.compile(r"(\d{4,})_.*\.json$")


class DamagedRunSkipped(UserWarning):
    """A saved run that could not be read was left out of a search or a history: a warning,
    so that a search goes on past it and every front end can name it (the CLI prints it in
    one line, the pytest gate in its summary)."""


def left_out(exc: RunError) -> None:
    """Name a run a search or a history went past because it could not be read."""
    warnings.warn(DamagedRunSkipped(f"left out a damaged run: {exc}"), stacklevel=3)


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
    write_atomic(path, run_document(payload))


def save_numbered(folder: Path, payload: dict, label: str) -> Path:
    """Save `payload` as the next `NNNN_<label>.json` in `folder`; never overwrites, and the
    number is unique in the folder whatever the label: taking the next number and writing
    the file happen under an exclusive lock on the folder (`_numbering`), so processes
    saving at once, with labels of other commits or other seconds, never share one."""
    folder.mkdir(parents=True, exist_ok=True)
    with _numbering(folder):
        return _write_next(folder, run_document(payload), label)


def _write_next(folder: Path, document: str, label: str) -> Path:
    """Write `document` as the folder's next number; the caller holds `_numbering`."""
    safe_label = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_") or "run"
    for _ in range(1000):
        path = folder / run_file_name(next_number(folder), safe_label)
        try:
            write_atomic(path, document)
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
    return parse_document(text, str(path))


def parse_document(text: str, source: str):
    """A run's JSON document parsed, wherever it was stored; a damaged one is one RunError
    naming `source`."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        what = "truncated" if exc.pos >= len(text.rstrip()) else "invalid"
        raise RunError(f"{source} is {what} JSON ({exc.msg} at line {exc.lineno}, column "
                       f"{exc.colno}): re-run the benchmarks to replace it") from None
    except RecursionError:  # arrays or objects nested deeper than any run writes
        raise RunError(f"{source} is damaged: its JSON nests deeper than Python reads; "
                       "re-run the benchmarks to replace it") from None
    except ValueError as exc:  # an integer of thousands of digits
        raise RunError(f"{source} is damaged: {exc}; re-run the benchmarks to replace it"
                       ) from None


def run_document(payload: dict) -> str:
    """A run's JSON document as every store keeps it (a run moved between stores keeps
    these very bytes)."""
    return json.dumps(payload, indent=2)


def content_hash(document: str | dict) -> str:
    """A run's identity, in every store: SHA-256 of its canonical JSON (keys sorted, no
    spaces), so that the same run formatted otherwise is the same run."""
    payload = json.loads(document) if isinstance(document, str) else document
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


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
    return run_from_json(read_json(p), str(p), path=p, samples=samples, summary=summary,
                         origin=origin_of(p))


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


def latest_run(folder: str | os.PathLike) -> Path | None:
    """The newest numbered run in `folder`, None if there is none."""
    found = list_runs(folder)
    return found[-1] if found else None


def origin_of(path: Path) -> RunRef | None:
    """A run file's place in the folder store it lies in: `<root>/<environment>/NNNN_<label>
    .json`; None for a file not named as a saved run."""
    number = run_number(path)
    if number is None:
        return None
    # As the user spelled it (messages and printed addresses keep their relative paths),
    # unless that spelling has no folder name to give the environment.
    folder = path.parent if path.parent.name else path.resolve().parent
    label = path.name.split("_", 1)[1].removesuffix(".json")
    return RunRef(str(folder.parent), folder.name, number, label, path=path)


class FolderStore:
    """Runs as JSON files, one folder per environment under `root`: the default store, one
    machine's (`location.Store`)."""

    is_database = False

    def __init__(self, root: Path):
        self.root = Path(root)
        self.name = str(self.root)
        self._hashes: dict[Path, str | None] = {}

    def check_writable(self, environment_key: str) -> None:
        check_writable(self.root / environment_key)

    def save(self, payload: dict, environment_key: str, label: str) -> RunRef:
        return origin_of(save_numbered(self.root / environment_key, payload, label))

    def environment_keys(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(d.name for d in self.root.iterdir() if d.is_dir() and list_runs(d))

    def refs(self, environment_key: str) -> list[RunRef]:
        return [origin_of(p) for p in list_runs(self.root / environment_key)]

    def load(self, ref: RunRef, *, samples: bool = True, summary: bool = False) -> Run:
        return load_run(ref.path, samples=samples, summary=summary)

    def load_many(self, refs: list[RunRef], *, samples: bool = True, summary: bool = False
                  ) -> list[Run | RunError]:
        """Each run as `load` reads it; a damaged one is its `RunError`, in its place."""
        out: list[Run | RunError] = []
        for ref in refs:
            try:
                out.append(self.load(ref, samples=samples, summary=summary))
            except RunError as exc:
                out.append(exc)
        return out

    def read_document(self, ref: RunRef) -> str:
        """The run's JSON as it lies in its file; one `RunError` line if it cannot be read."""
        try:
            return Path(ref.path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise RunError(f"cannot read {ref.path}: {exc}") from None

    def put(self, document: str, environment_key: str, label: str) -> tuple[RunRef, bool]:
        """Save a run's JSON as it is written, as the next number of its environment, unless
        the folder holds it already (same content hash): its place, and whether it was
        added. Under the folder's numbering lock, so two copies at once add it once."""
        folder = self.root / environment_key
        folder.mkdir(parents=True, exist_ok=True)
        identity = content_hash(document)
        with _numbering(folder):
            for ref in self.refs(environment_key):
                if self._hash(ref) == identity:
                    return ref, False
            return origin_of(_write_next(folder, document, label)), True

    def _hash(self, ref: RunRef) -> str | None:
        """A held run's content hash (None if it cannot be read), computed once a file: a
        saved file never changes."""
        path = Path(ref.path).resolve()
        if path not in self._hashes:
            try:
                self._hashes[path] = content_hash(self.read_document(ref))
            except (RunError, ValueError, RecursionError):
                self._hashes[path] = None
        return self._hashes[path]
