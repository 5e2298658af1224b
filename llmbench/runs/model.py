"""The one model of a saved run: pytest-benchmark's JSON, parsed once, for the gate, the report
and the pytest hooks alike.

A `Run` holds its `Benchmark`s by pytest's fullname, in the file's order, with what every
reader needs: raw per-round samples (the gate's input), pytest-benchmark's timing summary
(min, max, median, IQR, rounds: the report's columns), `extra_info` and its metrics, and the
`llmbench` section (environment, control samples). `run_from_json` validates once, every
problem one `RunError` line; what a reader requires beyond that (raw samples for the gate, the
timing summary for the report) it asks for by name, and a file that lacks it is refused with
the flag that would have saved it.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from llmbench.errors import UserError

# The version of the `llmbench` section a run is written in (`format`; runs written before it
# was recorded are format 1). 2: each case's own peak memory (format 1 recorded the process's
# high-water mark under the same name), and the stored verdict and its confirmation.
# 3: rounds disturbed by other work, listed per benchmark (extra_info disturbance.left_out)
# and left out of its samples; an older reader would judge them.
# 4: the confirmation's measure of the machine's move (`confirmation.host_move`), which
# clears candidates it did not pair; an older reader would leave them not confirmed.
# A run of a newer format is refused by name: this llmbench cannot know what it means.
FORMAT_VERSION = 4
# Groups in the order reports show them; any other group follows, alphabetically.
GROUP_ORDER = ("output-sweep", "input-sweep", "prefill", "decode", "kv-cache", "batch-size",
               "sequential-vs-batched", "engines", "server-generate",
               "server-concurrency", "server-capacity")
UNGROUPED = "ungrouped"
# Named conditions in reading order, the reference first; other names sort alphabetically.
CATEGORY_ORDER = ("sequential", "batched", "loop", "hf")
SUMMARY_STATS = ("min", "max", "median", "iqr", "rounds")  # pytest-benchmark's, as reported
# What a case records of the work it did (extra_info). One benchmark name in two runs is one
# measurement only when these agree: the same name in another profile, or in a profile that
# changed since, can run other prompts or other numbers of tokens.
WORK_SHAPE_FIELDS = ("input_tokens", "output_tokens", "batch_size", "concurrency",
                     "level_s")
_SAMPLES_HINT = ("llmbench's pytest suite saves them in every run under --baseline-dir; "
                 "with plain pytest-benchmark, pass --benchmark-save-data (with "
                 "--benchmark-save or --benchmark-autosave) or use --benchmark-json")


class RunError(UserError):
    """A run file that cannot be used: missing, not JSON, or without what the reader needs."""


# What a round of any benchmark can take, in seconds: a clock reads no shorter time than a
# nanosecond, and a round of an hour is no benchmark. A sample outside is a damaged file, and
# would overflow the statistics (a log of 5e-324) or draw negative error bars.
PHYSICAL_SECONDS = (1e-9, 3600.0)


def is_number(value) -> bool:
    """A finite int or float (not a bool); an int too large for a float is not one."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _physical(values, source: str, what: str) -> tuple[float, ...]:
    """`values` as seconds, each within PHYSICAL_SECONDS; one `RunError` naming the run and
    what holds them otherwise."""
    try:
        seconds = tuple(float(x) for x in values)
    except (TypeError, ValueError, OverflowError):
        raise RunError(f"{source}: {what} has samples that are not numbers; the file is "
                       "damaged") from None
    low, high = PHYSICAL_SECONDS
    if not all(low <= x <= high for x in seconds):
        raise RunError(f"{source}: {what} has samples outside {low:g} s to {high:g} s, "
                       "which no run measures; the file is damaged")
    return seconds


# extra_info's key for a round's wall time where the round's figure is not its duration.
ROUND_WALL_S = "round_wall_s"


def median(values: Sequence[float]) -> float:
    """The median of the suite's recorded values: the middle one, or the mean of the two
    middle ones (as pytest-benchmark's stats and numpy's compute it)."""
    return float(statistics.median(values))


@dataclass(frozen=True)
class Benchmark:
    """One benchmark of a run: raw per-round timings in seconds, pytest-benchmark's summary
    of them, the case's parameters and what it recorded in extra_info."""

    key: str  # pytest's fullname, unique within a run: the gate's key
    name: str
    group: str | None
    samples: tuple[float, ...]  # () only in a run read without requiring them
    extra_info: Mapping = field(default_factory=dict)
    params: Mapping = field(default_factory=dict)
    summary: Mapping[str, float] = field(default_factory=dict)  # SUMMARY_STATS found
    # Every round was disturbed by other work, so `samples` holds them all and no verdict
    # can rest on them.
    all_disturbed: bool = False

    @property
    def median_s(self) -> float:
        return self.summary["median"]

    @property
    def round_wall_s(self) -> float:
        """What one round takes on the wall clock: its median time, or what the case recorded
        under `ROUND_WALL_S` when its figure is not its duration (a round of the server's
        capacity is a whole search, its figure seconds per request)."""
        wall = self.extra_info.get(ROUND_WALL_S)
        if isinstance(wall, (int, float)) and not isinstance(wall, bool) and wall > 0:
            return float(wall)
        return self.median_s

    @property
    def disturbed_rounds(self) -> int | None:
        """Rounds other work disturbed, left out of `samples` (None: not recorded)."""
        count = self.extra_info.get("disturbed_rounds")
        return count if isinstance(count, int) and not isinstance(count, bool) else None


    @property
    def min_s(self) -> float:
        return self.summary["min"]

    @property
    def max_s(self) -> float:
        return self.summary["max"]

    @property
    def iqr_s(self) -> float:
        return self.summary["iqr"]

    @property
    def rounds(self) -> int:
        return int(self.summary["rounds"])

    def value(self, key: str):
        """A parameter of the case, else a field of extra_info, else None."""
        return self.params[key] if key in self.params else self.extra_info.get(key)

    def metric(self, key: str) -> tuple[float, float, float] | None:
        """(centre, low, high) of an extra_info metric such as ttft_ms or itl_ms.

        A number has no spread; raw values give median, min and max; a summary (the load
        generator's {"mean", "p50", "p90", "p99"}, or keys beside a p50 number like itl_p90_ms
        or itl_ms_p99) gives its median and the range of the percentiles (and min/max).
        None (not recorded, or recorded as unknown) has none.
        """
        extra = self.extra_info
        raw = extra.get(key)
        base, _, unit = key.rpartition("_")  # itl_ms: its p90 may be itl_p90_ms or itl_ms_p90
        tails = {m.group(1): v for k, v in extra.items()
                 if (m := re.fullmatch(rf"{re.escape(base)}_(p\d+)_{re.escape(unit)}", k)
                     or re.fullmatch(rf"{re.escape(key)}_(\w+)", k))}
        if is_number(raw) and tails:  # the median, with other percentiles beside it
            raw = {"p50": raw, **tails}
        elif raw is None:
            raw = tails
        if is_number(raw):
            return float(raw), float(raw), float(raw)
        if isinstance(raw, list) and raw and all(is_number(v) for v in raw):  # raw values
            return median(raw), float(min(raw)), float(max(raw))
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
    def work_shape(self) -> tuple:
        """The work it recorded (WORK_SHAPE_FIELDS, None where unrecorded): two runs of one
        benchmark are one measurement only where these agree."""
        return tuple(self.extra_info.get(k) for k in WORK_SHAPE_FIELDS)

    def shape_differences(self, other: Benchmark) -> list[str]:
        """How its recorded work differs from `other`'s ("output_tokens 32 vs 16"), [] if it
        does not; a field only one of them recorded (or recorded as unknown, None) is not a
        difference."""
        mine, theirs = self.extra_info, other.extra_info
        return [f"{k} {theirs[k]!r} vs {mine[k]!r}" for k in WORK_SHAPE_FIELDS
                if mine.get(k) is not None and theirs.get(k) is not None and mine[k] != theirs[k]]

    @property
    def tokens_per_second(self) -> float | None:
        """Output tokens/s at the median round (the load generator calls it token_throughput)."""
        value = self.extra_info.get("tokens_per_second", self.extra_info.get("token_throughput"))
        return float(value) if is_number(value) else None

    @property
    def ms_per_token(self) -> float | None:
        value = self.extra_info.get("ms_per_token")
        return float(value) if is_number(value) else None


@dataclass(frozen=True)
class RunRef:
    """A saved run's place: its store (a folder's path, or a database's URL without its
    password), its environment and its number there, and its label (`NNNN_<label>.json`
    in a folder). `address` names it anywhere a run is asked for."""

    store: str
    environment_key: str
    number: int
    label: str
    path: Path | None = None  # the file, in a folder store
    database: bool = False

    @property
    def name(self) -> str:
        """`<environment>/NNNN_<label>`, as a folder store's file is named below its root."""
        return f"{self.environment_key}/{self.number:04d}_{self.label}"

    @property
    def address(self) -> str:
        """How a user names it: the file's path, or `<store URL>#<environment>/NNNN`."""
        if not self.database:
            return str(self.path)
        return f"{self.store}#{self.environment_key}/{self.number:04d}"


@dataclass(frozen=True)
class Run:
    """A saved run. `source` names it in messages (a path, or a label for a run that was never
    written); `path` is its file, when it has one; `origin` its place in a store, when it was
    read from one (the folder store's runs have both)."""

    source: str
    benchmarks: Mapping[str, Benchmark]  # by key, in the file's order
    environment: Mapping | None  # None: not an llmbench run (no `llmbench` section)
    control_s: tuple[float, ...] = ()
    info: Mapping = field(default_factory=dict)  # the whole `llmbench` section
    commit_info: Mapping = field(default_factory=dict)
    datetime: str | None = None
    path: Path | None = None
    pairing: Mapping | None = None  # `llmbench ab`: this run's rounds alternated with another's
    # Slowdowns a plugin injected on top of the commit (`llmbench.bench.inject`): the run
    # measured other code than its commit says.
    injected: Mapping = field(default_factory=dict)
    origin: RunRef | None = None

    def paired_with(self, other: Run) -> bool:
        """Whether the two runs are the two sides of one paired A/B, this one the baseline:
        round i of each benchmark then pairs with round i of the other run."""
        a, b = self.pairing or {}, other.pairing or {}
        return (bool(a.get("session")) and a.get("session") == b.get("session")
                and (a.get("side"), b.get("side")) == ("baseline", "candidate"))

    @property
    def device(self) -> str | None:
        return (self.environment or {}).get("device")

    @property
    def testbed(self) -> Mapping | None:
        """The machine's facts (`runs.testbed`); None for a run saved before they were kept."""
        found = self.info.get("testbed")
        return found if isinstance(found, Mapping) else None

    @property
    def title(self) -> str:
        """What ran where, for headings and plot titles: `tiny on <CPU name> (float32)`."""
        env = self.environment or {}
        where = env.get("device_name") or env.get("device") or "an unknown device"
        if env.get("device_name") and env.get("device") not in (None, "cpu"):
            where = f"{env['device']}: {where}"
        dtype = f" ({env['dtype']})" if env.get("dtype") else ""
        return f"{env.get('model', 'unknown model')} on {where}{dtype}"

    def groups(self) -> dict[str, list[Benchmark]]:
        """Benchmarks by group, groups in report order, cases in their sweep's order."""
        found: dict[str, list[Benchmark]] = {}
        for bench in self.benchmarks.values():
            found.setdefault(bench.group or UNGROUPED, []).append(bench)
        order = [g for g in GROUP_ORDER if g in found] + sorted(set(found) - set(GROUP_ORDER))
        return {g: sorted(found[g], key=_case_order) for g in order}

    def group(self, name: str) -> list[Benchmark]:
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


def _case_order(bench: Benchmark):
    return (bench.name.split("[", 1)[0], tuple(_sort_value(v) for v in bench.params.values()),
            bench.name)


def left_out_rounds(extra_info: Mapping) -> frozenset[int]:
    """The rounds a run recorded as disturbed by other work (indices into its samples)."""
    recorded = extra_info.get("disturbance")
    indices = recorded.get("left_out") if isinstance(recorded, Mapping) else None
    if not isinstance(indices, list):
        return frozenset()
    return frozenset(i for i in indices if isinstance(i, int) and not isinstance(i, bool))


def _undisturbed(values: tuple[float, ...], extra_info: Mapping, found: dict[str, float]
                 ) -> tuple[tuple[float, ...], dict[str, float]]:
    """The samples and summary without the disturbed rounds: no verdict, plot or report rests
    on a round that other work slowed. A benchmark with every round disturbed keeps them
    all (its `all_disturbed` says so, and the gate gives it no verdict)."""
    left_out = left_out_rounds(extra_info)
    kept = tuple(v for i, v in enumerate(values) if i not in left_out)
    if not left_out or not kept:
        return values, found
    from pytest_benchmark.stats import Stats  # pytest-benchmark's own formulas

    stats = Stats()
    stats.data = list(kept)
    return kept, {**found, **{k: float(getattr(stats, k)) for k in found}}


def _samples(entry: Mapping, key: str, source: str) -> tuple[float, ...]:
    data = entry["stats"].get("data") or ()
    if not isinstance(data, (list, tuple)):
        raise RunError(f"{source}: {key!r} has samples that are not a list; the file is "
                       "damaged")
    return _physical(data, source, repr(key))


def run_from_json(data, source: str, *, path: Path | None = None, samples: bool = True,
                  summary: bool = False, origin: RunRef | None = None) -> Run:
    """Validate pytest-benchmark JSON (already parsed) into a `Run`; `RunError` if unusable.
    `samples`: every benchmark must hold its raw per-round timings (the gate judges them);
    `summary`: every benchmark must hold pytest-benchmark's SUMMARY_STATS (the report's)."""
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise RunError(f"{source} is not a pytest-benchmark run: no 'benchmarks' list")
    if not data["benchmarks"]:
        raise RunError(f"{source} holds no benchmarks: the run measured nothing")
    benchmarks: dict[str, Benchmark] = {}
    for entry in data["benchmarks"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("stats"), dict):
            raise RunError(f"{source} is not a pytest-benchmark run: a benchmark has no stats")
        key = entry.get("fullname") or entry.get("name")
        if not isinstance(key, str) or not key:
            raise RunError(f"{source}: a benchmark has neither fullname nor name")
        if key in benchmarks:
            raise RunError(f"{source}: benchmark {key!r} appears twice")
        name = str(entry.get("name") or key)
        found = {k: float(v) for k in SUMMARY_STATS if is_number(v := entry["stats"].get(k))}
        _physical([found[k] for k in ("min", "max", "median") if k in found], source,
                  f"{key!r}'s summary")
        if summary and (missing := [k for k in SUMMARY_STATS if k not in found]):
            raise RunError(f"{source}: benchmark {name} lacks stats {', '.join(missing)}")
        extra = dict(entry.get("extra_info") or {})
        values = _samples(entry, key, source)
        kept, found = _undisturbed(values, extra, found)
        benchmarks[key] = Benchmark(
            key=key, name=name, group=entry.get("group"), samples=kept, extra_info=extra,
            params=dict(entry.get("params") or {}), summary=found,
            all_disturbed=bool(values) and left_out_rounds(extra) >= set(range(len(values))))
    without = [k for k, b in benchmarks.items() if not b.samples]
    if samples and without:
        raise RunError(f"{source} has no raw per-round samples (stats.data) for "
                       f"{len(without)} of {len(benchmarks)} benchmarks, so no test can be run "
                       f"on it: {_SAMPLES_HINT}")
    section = data.get("llmbench") if isinstance(data.get("llmbench"), dict) else {}
    written = section.get("format", 1)
    if not isinstance(written, int) or isinstance(written, bool) or written < 1:
        raise RunError(f"{source}: its llmbench format {written!r} is not a version number; "
                       "the file is damaged")
    if written > FORMAT_VERSION:
        raise RunError(f"{source} was written in llmbench run format {written}, newer than "
                       f"this llmbench reads (up to {FORMAT_VERSION}): upgrade llmbench")
    environment = section.get("environment")
    control = section.get("control_s") or ()
    if not isinstance(control, (list, tuple)):
        raise RunError(f"{source}: its control samples are not a list; the file is damaged")
    control = _physical(control, source, "the control workload")
    return Run(source=source, benchmarks=benchmarks,
               environment=dict(environment) if isinstance(environment, dict) else None,
               control_s=control, info=section,
               commit_info=dict(data.get("commit_info") or {}), datetime=data.get("datetime"),
               path=path, pairing=data.get("llmbench_pairing")
               if isinstance(data.get("llmbench_pairing"), dict) else None,
               injected=dict(data["llmbench_injected"])
               if isinstance(data.get("llmbench_injected"), dict) else {}, origin=origin)


def is_same_run(a: Run, b: Run) -> bool:
    """Whether two loaded runs are one run (the same file, a copy, or the same path spelled
    twice): every benchmark they share has identical samples. Two separate runs never agree
    to the nanosecond on every round of every benchmark."""
    common = [k for k in a.benchmarks if k in b.benchmarks]
    return bool(common) and all(a.benchmarks[k].samples == b.benchmarks[k].samples
                                for k in common)
