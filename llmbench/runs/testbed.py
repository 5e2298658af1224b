"""The machine a run was measured on (its testbed), and which of its facts make two machines
one testbed.

A team measures on many machines sharing one store: CI runners, GPU hosts, laptops. Two
runners of one CI pool are one testbed when they are the same kind of machine; what "the
same kind" means is the team's to say. Conbench hashed a machine's name, cores and memory,
and two CPU models landed in one testbed (its issue 1412). So every run records all the
facts below (`describe`, `llmbench.bench.record`), and which of them make two machines one
testbed is chosen when runs are read (`chosen_fields`: `$LLMBENCH_TESTBED_FIELDS`, or the
suite's `--testbed-fields`), not frozen into the runs: a team that changes its mind sees its
history regrouped. The environment (`runs.environment`) still decides what is comparable at
all; the testbed narrows it to one kind of machine where a store holds several.

A run saved before testbeds were recorded matches any testbed: it says nothing against it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence

from llmbench.errors import UserError

# Every fact a run records of its machine, in the order they are shown.
FIELDS = ("cpu_model", "logical_cpus", "memory_gib", "gpu_name", "gpu_count", "gpu_driver",
          "cuda", "mps")
# Which facts make two machines one testbed unless the team says otherwise: the hardware,
# not the driver or toolkit (those are recorded, and shown where they differ).
DEFAULT_FIELDS = ("cpu_model", "logical_cpus", "memory_gib", "gpu_name", "gpu_count")
FIELDS_ENV = "LLMBENCH_TESTBED_FIELDS"


def parse_fields(text: str, where: str = FIELDS_ENV) -> tuple[str, ...]:
    """A comma-separated choice of FIELDS; one `UserError` line naming what is wrong."""
    chosen = tuple(dict.fromkeys(f.strip() for f in text.split(",") if f.strip()))
    unknown = [f for f in chosen if f not in FIELDS]
    if unknown or not chosen:
        what = f"unknown field(s) {', '.join(unknown)}" if unknown else "no field"
        raise UserError(f"{where}: {what}; choose from {', '.join(FIELDS)} (comma-separated)")
    return chosen


def chosen_fields() -> tuple[str, ...]:
    """The fields that make two machines one testbed: `$LLMBENCH_TESTBED_FIELDS`, or the
    default."""
    text = os.environ.get(FIELDS_ENV)
    return DEFAULT_FIELDS if text is None else parse_fields(text)


def testbed_id(facts: Mapping, fields: Sequence[str]) -> str:
    """A short, stable name for the testbed `facts` belong to under `fields`."""
    chosen = {f: facts.get(f) for f in fields}
    return hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()[:12]


def same_testbed(a: Mapping | None, b: Mapping | None,
                 fields: Sequence[str] | None = None) -> bool:
    """Whether two runs' testbeds are one under `fields` (None: `chosen_fields`); a run that
    recorded none matches any."""
    if not a or not b:
        return True
    return all(a.get(f) == b.get(f) for f in (fields or chosen_fields()))


def differences(a: Mapping | None, b: Mapping | None,
                fields: Sequence[str] | None = None) -> list[str]:
    """How two testbeds differ on `fields`, one readable item each."""
    if not a or not b:
        return []
    return [f"testbed {f} {a.get(f)!r} vs {b.get(f)!r}" for f in (fields or chosen_fields())
            if a.get(f) != b.get(f)]


def label(facts: Mapping | None) -> str:
    """One line a person recognises a machine by: its CPU, cores, memory and GPUs."""
    if not facts:
        return "unknown testbed (saved before testbeds were recorded)"
    text = (f"{facts.get('cpu_model') or 'unknown CPU'}, {facts.get('logical_cpus')} CPUs, "
            f"{facts.get('memory_gib')} GiB")
    if facts.get("gpu_count"):
        text += f", {facts['gpu_count']}x {facts.get('gpu_name')}"
    return text
