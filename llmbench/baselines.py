"""Saved runs: the environment record that makes runs comparable, and atomic storage.

A run is pytest-benchmark's JSON with an `llmbench` section added. Runs live in one folder
per environment (model, device, dtype) under `baselines/`, so that runs of different
environments cannot be compared by accident.
"""

from __future__ import annotations

import json
import os
import platform
import re
import tempfile
from pathlib import Path

BASELINES_DIR = "baselines"
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
