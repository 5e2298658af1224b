"""A saved pytest-benchmark run as the report and its plots read it: each benchmark's timing
summary and recorded metrics, grouped and ordered for display; `load_run` reads one from disk,
every problem a one-line UserError."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from llmbench.errors import UserError
from llmbench.runs.store import read_json

# Groups in the order the report shows them; any other group follows, alphabetically.
GROUP_ORDER = ("output-sweep", "input-sweep", "prefill", "decode", "kv-cache", "batch-size",
               "sequential-vs-batched", "engines", "server-generate", "server-stream",
               "server-concurrency")
# Named conditions in reading order, the reference first; other names sort alphabetically.
CATEGORY_ORDER = ("sequential", "batched", "loop", "hf")
_STATS = ("min", "max", "median", "iqr", "rounds")


def is_number(value) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


@dataclass(frozen=True)
class Bench:
    """One benchmark of a run: its timing summary in seconds, and what it recorded."""

    key: str  # pytest's fullname: the gate's key
    name: str
    group: str
    params: Mapping
    extra: Mapping
    min_s: float
    max_s: float
    median_s: float
    iqr_s: float
    rounds: int

    def value(self, key: str):
        """A parameter of the case, else a field of extra_info, else None."""
        return self.params[key] if key in self.params else self.extra.get(key)

    def metric(self, key: str) -> tuple[float, float, float] | None:
        """(centre, low, high) of an extra_info metric such as ttft_ms or itl_ms.

        A number has no spread; raw values give median, min and max; a summary (the load
        generator's {"mean", "p50", "p90", "p99"}, or keys beside a p50 number like itl_p90_ms
        or itl_ms_p99) gives its median and the range of the percentiles (and min/max).
        """
        raw = self.extra.get(key)
        base, _, unit = key.rpartition("_")  # itl_ms: its p90 may be itl_p90_ms or itl_ms_p90
        tails = {m.group(1): v for k, v in self.extra.items()
                 if (m := re.fullmatch(rf"{re.escape(base)}_(p\d+)_{re.escape(unit)}", k)
                     or re.fullmatch(rf"{re.escape(key)}_(\w+)", k))}
        if is_number(raw) and tails:  # the median, with other percentiles beside it
            raw = {"p50": raw, **tails}
        elif raw is None:
            raw = tails
        if is_number(raw):
            return float(raw), float(raw), float(raw)
        if isinstance(raw, list) and raw and all(is_number(v) for v in raw):  # raw samples
            ordered = sorted(map(float, raw))
            return ordered[len(ordered) // 2], ordered[0], ordered[-1]
        if not isinstance(raw, Mapping):
            return None
        summary = {str(k).lower(): float(v) for k, v in raw.items() if is_number(v)}
        centre = next((summary[k] for k in ("p50", "median", "mean") if k in summary), None)
        if centre is None:
            return None
        spread = [v for k, v in summary.items()
                  if k in ("min", "max") or re.fullmatch(r"p\d+(\.\d+)?", k)]
        return centre, min(spread + [centre]), max(spread + [centre])

    @property
    def tokens_per_second(self) -> float | None:
        """Output tokens/s at the median round (the load generator calls it token_throughput)."""
        value = self.extra.get("tokens_per_second", self.extra.get("token_throughput"))
        return float(value) if is_number(value) else None

    @property
    def ms_per_token(self) -> float | None:
        value = self.extra.get("ms_per_token")
        return float(value) if is_number(value) else None


@dataclass(frozen=True, eq=False)
class Run:
    """A saved run as the report reads it; `payload` is the JSON, for the gate."""

    path: Path
    benchmarks: tuple[Bench, ...]
    payload: Mapping

    @property
    def section(self) -> Mapping:
        section = self.payload.get("llmbench")
        return section if isinstance(section, Mapping) else {}

    @property
    def environment(self) -> Mapping:
        return self.section.get("environment") or {}

    @property
    def title(self) -> str:
        """What ran where, for headings and plot titles: `tiny on <CPU name> (float32)`."""
        env = self.environment
        where = env.get("device_name") or env.get("device") or "an unknown device"
        if env.get("device_name") and env.get("device") not in (None, "cpu"):
            where = f"{env['device']}: {where}"
        dtype = f" ({env['dtype']})" if env.get("dtype") else ""
        return f"{env.get('model', 'unknown model')} on {where}{dtype}"

    def groups(self) -> dict[str, list[Bench]]:
        """Benchmarks by group, groups in report order, cases in their sweep's order."""
        found: dict[str, list[Bench]] = {}
        for bench in self.benchmarks:
            found.setdefault(bench.group, []).append(bench)
        order = [g for g in GROUP_ORDER if g in found] + sorted(set(found) - set(GROUP_ORDER))
        return {g: sorted(found[g], key=_case_order) for g in order}

    def group(self, name: str) -> list[Bench]:
        return self.groups().get(name, [])


def _sort_value(value):
    """Sweep points sort numerically (out=8 before out=16), then flags, then names."""
    if isinstance(value, (list, tuple)):
        return tuple(_sort_value(v) for v in value)
    if isinstance(value, bool):
        return (1, int(not value), "")  # True first: cache on before cache off
    if is_number(value):
        return (0, float(value), "")
    if value in CATEGORY_ORDER:
        return (2, CATEGORY_ORDER.index(value), "")
    return (3, 0, str(value))


def _case_order(bench: Bench):
    return (bench.name.split("[", 1)[0], tuple(_sort_value(v) for v in bench.params.values()),
            bench.name)


def _bench_from(raw, where: str) -> Bench:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("stats"), Mapping):
        raise UserError(f"{where} is not a pytest-benchmark run: a benchmark has no stats")
    name, st = str(raw.get("name") or raw.get("fullname")), raw["stats"]
    if missing := [k for k in _STATS if not is_number(st.get(k))]:
        raise UserError(f"{where}: benchmark {name} lacks stats {', '.join(missing)}")
    return Bench(key=str(raw.get("fullname") or name), name=name,
                 group=str(raw.get("group") or "ungrouped"), params=dict(raw.get("params") or {}),
                 extra=dict(raw.get("extra_info") or {}), min_s=float(st["min"]),
                 max_s=float(st["max"]), median_s=float(st["median"]), iqr_s=float(st["iqr"]),
                 rounds=int(st["rounds"]))


def load_run(path: str | os.PathLike) -> Run:
    """Read a saved pytest-benchmark run; every problem is one UserError line."""
    path = Path(path)
    payload = read_json(path)
    if not isinstance(payload, Mapping) or not isinstance(payload.get("benchmarks"), list):
        raise UserError(f"{path} is not a pytest-benchmark run: no 'benchmarks' list")
    if not payload["benchmarks"]:
        raise UserError(f"{path} holds no benchmarks: the run measured nothing")
    return Run(path, tuple(_bench_from(b, str(path)) for b in payload["benchmarks"]), payload)
