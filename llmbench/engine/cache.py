"""An on-disk cache of converted models whose entries appear whole or not at all.

An entry is a directory built in a temporary sibling and renamed into place, with a
manifest written last listing every file and its size. A directory without a valid
manifest, or whose files do not match it, is damaged and gets rebuilt. Concurrent builders
(pytest-xdist workers) race harmlessly: the first rename wins and the others discard theirs.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

MANIFEST = "llmbench-manifest.json"


def cache_root() -> Path:
    """`$LLMBENCH_CACHE`, else `$XDG_CACHE_HOME/llmbench`, else `~/.cache/llmbench`."""
    if os.environ.get("LLMBENCH_CACHE"):
        return Path(os.environ["LLMBENCH_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "llmbench"


def is_complete(entry: Path) -> bool:
    """True when `entry` has a manifest and every file it lists exists with its size."""
    try:
        manifest = json.loads((entry / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        return bool(files) and all(
            (entry / name).stat().st_size == size for name, size in files.items()
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def manifest(entry: Path) -> dict | None:
    """A complete entry's manifest (its files and what it was built from), else None."""
    if not is_complete(entry):
        return None
    return json.loads((entry / MANIFEST).read_text(encoding="utf-8"))


def _write_manifest(directory: Path, meta: dict) -> None:
    files = {
        str(p.relative_to(directory)): p.stat().st_size
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }
    payload = {"files": files, **meta}
    (directory / MANIFEST).write_text(json.dumps(payload, indent=2), encoding="utf-8")


def discard(entry: Path) -> None:
    """Remove a (damaged) entry; renaming first keeps readers from seeing half of it."""
    if not entry.exists():
        return
    doomed = entry.with_name(f".{entry.name}.damaged-{uuid.uuid4().hex}")
    try:
        entry.rename(doomed)
    except OSError:
        return  # another process already moved it
    shutil.rmtree(doomed, ignore_errors=True)


def ensure_entry(entry: Path, build: Callable[[Path], None], meta: dict | None = None) -> Path:
    """Return `entry`, building it with `build(tmp_dir)` first unless it is complete.

    `build` fills an empty directory. If it raises, nothing is left behind.
    """
    if is_complete(entry):
        return entry
    discard(entry)
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = entry.with_name(f".{entry.name}.tmp-{os.getpid()}-{uuid.uuid4().hex}")
    tmp.mkdir()
    try:
        build(tmp)
        _write_manifest(tmp, meta or {})
        try:
            tmp.rename(entry)
        except OSError:
            # Lost a race with another builder; theirs is as good as ours.
            if not is_complete(entry):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return entry
