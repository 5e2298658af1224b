"""The environment a run was measured in, and what makes two runs comparable.

An environment is model (and its fingerprint), device and its name, dtype, threads, the
engine's KV cache kind, compilation and attention, and how many passes the rounds were taken
in (`passes`: a median taken in passes over every case sits a few percent above one taken
back to back, so the two are different measurements): runs
of different environments are never compared by accident (`environment_differences`), and
each environment gets its own folder of runs (`environment_key`). Library versions are
recorded and shown (`version_differences`), never enforced: comparing a torch or
transformers upgrade is a main use.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Mapping

from llmbench.errors import UserError

# What makes two runs comparable at all; library versions are deliberately absent.
MATCHED_FIELDS = ("model", "fingerprint", "device", "device_name", "dtype", "threads",
                  "kv_cache", "compile", "attn", "weights", "passes")
# What a field means in a run saved before it was recorded: those runs all used this.
FIELD_DEFAULTS = {"kv_cache": "dynamic", "compile": False, "attn": "auto",
                  "weights": "native", "passes": 1}
# Fields of pytest-benchmark's machine_info that change from run to run on the same machine
# and would make every comparison warn.
VOLATILE_CPU_FIELDS = ("hz_actual", "hz_actual_friendly", "hz_advertised",
                       "hz_advertised_friendly", "l2_cache_associativity")


class EnvironmentMismatch(UserError):
    """Two runs from different environments; `differences` lists them, one per line."""

    def __init__(self, differences: list[str]):
        self.differences = list(differences)
        super().__init__("runs come from different environments: " + "; ".join(differences)
                         + " (pass --allow-mismatch to compare anyway)")


def environment_key(model: str, device: str, dtype: str, variant: str = "") -> str:
    """The folder name for one environment, e.g. `smollm2-135m-cpu-float32`, or
    `smollm2-135m-cpu-float32-static-cache` for an engine variant (`EngineConfig.variant`)."""
    safe_model = re.sub(r"[^A-Za-z0-9._@-]+", "_", model).strip("_")
    return "-".join(filter(None, (safe_model, device, dtype, variant)))


def library_versions() -> dict[str, str]:
    import importlib.metadata as md

    versions = {"python": platform.python_version()}
    for package in ("torch", "transformers", "torchao", "llmbench", "pytest-benchmark"):
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


def environment_field(environment: Mapping, name: str):
    """A field of a recorded environment; for a run saved before the field was recorded,
    what every such run used (`FIELD_DEFAULTS`)."""
    return environment.get(name, FIELD_DEFAULTS.get(name))


def environment_differences(baseline: Mapping | None, candidate: Mapping | None) -> list[str]:
    """What makes two environments incomparable, one readable item each; [] if they match."""
    if baseline is None or candidate is None:
        which = [side for side, env in (("baseline", baseline), ("candidate", candidate))
                 if env is None]
        return [f"no llmbench environment record in the {' and '.join(which)} run"]
    out = []
    for name in MATCHED_FIELDS:
        a, b = environment_field(baseline, name), environment_field(candidate, name)
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
