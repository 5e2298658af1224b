"""The regression gate: two loaded runs and the options in, a verdict table and an exit code out.

`screen_runs` takes two runs already loaded (callers load them through `llmbench.runs`;
the gate reads no file), checks that they are comparable (environment, benchmarks in
common), resolves each benchmark's threshold, measures the machine-speed ratio from the
control samples (divided out where `host_speed` says so), and hands the samples to
`stats.compare_family`. `render` turns the
result into text, markdown or JSON; `GateResult.exit_code` is what the CLI and pytest report.
Beside the timings, each benchmark's counted work is compared exactly (`llmbench.gate.work`):
more work than the work threshold fails the gate whatever the timing verdict.

Inconclusive verdicts are never a silent pass: every renderer shows them in the table and
counts them in the summary line, with the rounds per side that would decide them. By
default they do not fail the gate (exit 0), because on a noisy machine a short run is
often inconclusive and a gate that fails on "could not tell" is one people learn to ignore;
`fail_on_inconclusive` (`--fail-on-inconclusive`) makes them fail it (exit 1) for users
who want every benchmark verified.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

import llmbench.gate.memory as peak_memory
import llmbench.gate.work as counted_work
from llmbench.errors import Exit, UserError
from llmbench.gate import code_level, host_speed, sequential, stats, stored
from llmbench.gate import noise as between_noise
from llmbench.gate.confirmation import Confirmation
from llmbench.runs.code import code_differences
from llmbench.runs.environment import (
    EnvironmentMismatch,
    environment_differences,
    version_differences,
)
from llmbench.runs.model import Run, is_same_run

DEFAULT_ALPHA = next(f.default for f in dataclasses.fields(stats.Rule) if f.name == "alpha")


class NothingInCommon(UserError):
    """The two runs share no benchmark."""


class SameRun(UserError):
    """Both sides are one run: any verdict would only restate that it equals itself."""


def parse_fraction(text: str, *, allow_zero: bool = False) -> float:
    """'10%' -> 0.10 and '0.1' -> 0.1; a bare number >= 1 is refused as ambiguous. 0 only
    with `allow_zero` (the work threshold, where 0 fails any growth)."""
    raw = text.strip()
    example = "1% or a fraction like 0.01" if allow_zero else "10% or a fraction like 0.1"
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise ValueError(f"expected a percentage like {example}, got {text!r}") from None
    if not raw.endswith("%") and value >= 1:
        raise ValueError(f"{text!r} is ambiguous: write {raw}% for a percentage, or a "
                         "fraction below 1")
    if allow_zero and not (math.isfinite(value) and value >= 0):
        raise ValueError(f"work threshold must be >= 0, got {text!r}")
    if not allow_zero and not (math.isfinite(value) and value > 0):
        raise ValueError(f"threshold must be > 0, got {text!r}")
    return value


def parse_work_threshold(text: str) -> float:
    """A work threshold: like `parse_fraction`, but 0 (any growth fails) is allowed."""
    return parse_fraction(text, allow_zero=True)


def parse_threshold_for(text: str) -> tuple[str, float]:
    """'GROUP_OR_BENCHMARK=PCT' -> (key, fraction)."""
    key, sep, pct = text.rpartition("=")
    if not sep or not key.strip():
        raise ValueError(f"expected GROUP_OR_BENCHMARK=PCT, e.g. decode=20%, got {text!r}")
    return key.strip(), parse_fraction(pct)


@dataclass(frozen=True)
class GateOptions:
    """How to judge a comparison; every front end (CLI, pytest, A/B) builds one of these."""

    threshold: float | None = None  # the whole run; None: the device's default
    threshold_for: Mapping[str, float] = field(default_factory=dict)  # group or benchmark
    alpha: float = DEFAULT_ALPHA
    normalize: bool = False
    allow_mismatch: bool = False
    fail_on_inconclusive: bool = False
    # Counted work that grows beyond work_threshold fails the gate, unless not work_gate.
    work_threshold: float = counted_work.DEFAULT_WORK_THRESHOLD
    work_gate: bool = True
    # A case's own peak memory that grows beyond memory_threshold fails the gate.
    memory_threshold: float = peak_memory.DEFAULT_MEMORY_THRESHOLD

    def __post_init__(self) -> None:
        stats.Rule(alpha=self.alpha)  # validates alpha with the rule's own message
        stats.ThresholdOverrides(groups=dict(self.threshold_for), run=self.threshold)
        if not (math.isfinite(self.work_threshold) and self.work_threshold >= 0):
            raise ValueError(f"work threshold must be >= 0, got {self.work_threshold!r}")
        if not (math.isfinite(self.memory_threshold) and self.memory_threshold > 0):
            raise ValueError(f"memory threshold must be > 0, got {self.memory_threshold!r}")


class Judged(Enum):
    PAIRED = "paired"  # the two sides of one paired A/B, on their pairs
    SAME_CODE = "same code"  # stored runs of one code: no verdict on it
    STORED = "stored"  # stored runs of different code


@dataclass(frozen=True)
class GateResult:
    baseline: Run
    candidate: Run
    options: GateOptions
    comparisons: tuple[stats.Comparison, ...]
    labels: Mapping[str, str]  # benchmark key -> the name shown
    speed: stats.SpeedRatio | None  # None: a run has no control samples
    mismatches: tuple[str, ...] = ()  # environment differences allowed by allow_mismatch
    versions: Mapping[str, tuple] = field(default_factory=dict)
    only_baseline: tuple[str, ...] = ()
    only_candidate: tuple[str, ...] = ()
    # In both runs under one name but recorded doing other work (key -> how): not compared.
    other_work: Mapping[str, str] = field(default_factory=dict)
    design: sequential.Design | None = None  # paired A/B: the looks its verdicts were taken at
    pairing: Mapping | None = None  # paired A/B: every pair and why each benchmark stopped
    work: tuple[counted_work.WorkFinding, ...] = ()  # counted work, benchmark by benchmark
    memory: tuple[peak_memory.MemoryFinding, ...] = ()  # each case's own peak memory
    # How the two runs' code differs ([]: the same code, so no verdict on it); None when
    # judged paired, where the question does not arise.
    code: tuple[str, ...] | None = None
    noise: between_noise.NoiseEstimate | None = None  # stored comparisons: the noise between runs
    between: Mapping[str, between_noise.Between] = field(default_factory=dict)
    # Stored comparisons with control samples: the machine's speed, and whether the
    # candidate's rounds were divided by it (`host_speed`).
    host: host_speed.HostSpeed | None = None
    # The paired A/B that settled a stored comparison's slower benchmarks, or why none ran.
    confirmation: Confirmation | None = None

    @property
    def judged(self) -> Judged:
        """How the two runs were judged: on pairs, as the same code, or as stored runs of
        different code (`code` is None, empty, or says how they differ)."""
        return (Judged.PAIRED if self.code is None else Judged.SAME_CODE if not self.code
                else Judged.STORED)

    @property
    def same_code(self) -> bool:
        """Both runs measured the same code: any difference is the machine's."""
        return self.judged is Judged.SAME_CODE

    @property
    def work_versions(self) -> list[str]:
        """Version differences that change what is counted: work then cannot fail the gate."""
        return counted_work.versions_differ(self.versions)

    @property
    def work_regressions(self) -> list[counted_work.WorkFinding]:
        """The findings of more work that fail the gate."""
        if not self.options.work_gate or self.work_versions:
            return []
        return [f for f in self.work if f.is_regression]

    @property
    def memory_regressions(self) -> list[peak_memory.MemoryFinding]:
        """Cases whose own peak memory grew beyond the threshold; none between runs of the
        same code (a peak is not exact: the same code's differences are the allocator's)."""
        return [] if self.same_code else [f for f in self.memory if f.is_regression]

    @property
    def sequential(self) -> str:
        """The paired design in words, for the rule line."""
        d = self.design
        return (f"looks at {', '.join(map(str, d.looks))} pairs, each at alpha/{len(d.looks)}"
                if d else "")

    @property
    def confidence(self) -> float:
        """The CI's confidence: 1 - 2 alpha, split over the looks when judged paired."""
        return 1 - 2 * (self.design.look_alpha if self.design else self.options.alpha)

    @property
    def counts(self) -> dict[str, int]:
        return stats.summarize(self.comparisons)

    @property
    def exit_code(self) -> int:
        if self.work_regressions or self.memory_regressions:
            return Exit.REGRESSION
        if self.same_code:
            return Exit.OK
        counts = self.counts
        if counts["regression"] or (self.options.fail_on_inconclusive and counts["inconclusive"]):
            return Exit.REGRESSION
        return Exit.NOT_CONFIRMED if counts[stats.Verdict.NOT_CONFIRMED.value] else Exit.OK

    @property
    def rounds_needed(self) -> tuple[int, str] | None:
        """The most rounds per side (or pairs) that an inconclusive benchmark asks for."""
        needed = [(c.rounds_needed, c.unit) for c in self.comparisons
                  if c.rounds_needed is not None]
        return max(needed, default=None)


def _resolve_overrides(run: Run, shared: Sequence[str], options: GateOptions
                       ) -> stats.ThresholdOverrides:
    by_key: dict[str, float] = {}
    by_group: dict[str, float] = {}
    groups = {run.benchmarks[k].group for k in shared} - {None}
    for name, value in options.threshold_for.items():
        keys = [k for k in shared if name in (k, run.benchmarks[k].name)]
        if keys:
            by_key.update(dict.fromkeys(keys, value))
        elif name in groups:
            by_group[name] = value
        else:
            raise UserError(f"--threshold-for {name}: no benchmark or group of that name in "
                            f"the runs; groups are: {', '.join(sorted(groups)) or 'none'}")
    return stats.ThresholdOverrides(benchmarks=by_key, groups=by_group, run=options.threshold)


def _labels(run: Run, keys: Sequence[str]) -> dict[str, str]:
    names = [run.benchmarks[k].name for k in keys]
    return {k: n if names.count(n) == 1 else k for k, n in zip(keys, names, strict=True)}


def _common_and_thresholds(baseline: Run, candidate: Run, options: GateOptions
                           ) -> tuple[list[str], dict[str, str], dict[str, float],
                                      tuple[str, ...]]:
    """The benchmarks both runs have and ran alike, those they have but ran otherwise (and
    how), each compared one's threshold, and the environment differences allowed;
    `UserError` when the runs cannot be compared."""
    if is_same_run(baseline, candidate):
        which = (baseline.source if baseline.source == candidate.source
                 else f"{baseline.source} and {candidate.source}")
        raise SameRun(f"both sides are the same run ({which}: identical samples): compare "
                      "two different runs")
    mismatches = environment_differences(baseline.environment, candidate.environment)
    if mismatches and not options.allow_mismatch:
        raise EnvironmentMismatch(mismatches)
    shared = [k for k in candidate.benchmarks if k in baseline.benchmarks]
    # Timing one prompt against another is no verdict on the code: a benchmark whose work
    # changed (another --profile, or a profile edited since) is set aside, never judged.
    other_work = {k: "; ".join(d) for k in shared
                  if (d := candidate.benchmarks[k].shape_differences(baseline.benchmarks[k]))}
    common = [k for k in shared if k not in other_work]
    if not common:
        raise NothingInCommon(
            f"no benchmarks in common between {baseline.source} "
            f"({len(baseline.benchmarks)}) and {candidate.source} "
            f"({len(candidate.benchmarks)}"
            + (f"; {len(other_work)} of the same names did other work, e.g. "
               f"{next(iter(other_work.values()))}" if other_work else "")
            + "): were they run with the same -k and profile?")
    device = candidate.device or baseline.device
    # Names resolve against every shared benchmark: one set aside is still in both runs.
    overrides = _resolve_overrides(candidate, shared, options)
    try:
        thresholds = {k: stats.threshold_for(k, candidate.benchmarks[k].group, device or "?",
                                             overrides) for k in common}
    except ValueError:
        raise UserError(f"no default threshold for device {device!r}: pass --threshold") from None
    return common, other_work, thresholds, tuple(mismatches) if options.allow_mismatch else ()


def _result(baseline: Run, candidate: Run, options: GateOptions, common: Sequence[str],
            other_work: Mapping[str, str], comparisons, speed, mismatches, design=None
            ) -> GateResult:
    return GateResult(
        baseline=baseline, candidate=candidate, options=options, comparisons=comparisons,
        labels=_labels(candidate, common), speed=speed, mismatches=mismatches,
        versions=version_differences(baseline.environment, candidate.environment),
        only_baseline=tuple(k for k in baseline.benchmarks if k not in candidate.benchmarks),
        only_candidate=tuple(k for k in candidate.benchmarks if k not in baseline.benchmarks),
        other_work=other_work, design=design,
        work=counted_work.judge_all(
            common, {k: baseline.benchmarks[k].extra_info for k in common},
            {k: candidate.benchmarks[k].extra_info for k in common}, options.work_threshold),
        memory=peak_memory.judge_all(
            common, {k: baseline.benchmarks[k].extra_info for k in common},
            {k: candidate.benchmarks[k].extra_info for k in common}, options.memory_threshold,
            (baseline.info.get("format", 1), candidate.info.get("format", 1))))


def _undisturbed_only(comparisons: Sequence[stats.Comparison], baseline: Run, candidate: Run
                      ) -> tuple[stats.Comparison, ...]:
    """No verdict rests on rounds that other work disturbed: a benchmark whose every round
    was disturbed in either run is inconclusive, and says so."""
    out = []
    for c in comparisons:
        sides = [side for side, run in (("baseline", baseline), ("candidate", candidate))
                 if run.benchmarks[c.name].all_disturbed]
        if sides:
            c = dataclasses.replace(
                c, verdict=stats.Verdict.INCONCLUSIVE, rounds_needed=None,
                reason=f"every round of the {' and the '.join(sides)} was disturbed by other "
                       "work on the machine: measure it again alone")
        out.append(c)
    return tuple(out)


def screen_runs(baseline: Run, candidate: Run, options: GateOptions | None = None,
                history: Sequence[Run] = ()) -> GateResult:
    """Judge every benchmark the two runs share; `UserError` when they cannot be compared.
    The two sides of one paired A/B (`llmbench ab --keep`) are judged on their pairs, as
    `ab` judged them, unless --normalize asks for the unpaired rule.

    Two stored runs are judged by `stored`'s rules: no verdict when they measured the same
    code, and otherwise the rounds' verdicts only where the noise between runs, measured
    from `history` (this environment's saved runs, `noise.estimate_noise`), supports them.
    A confirmation settles those next (`pipeline`)."""
    options = options or GateOptions()
    if baseline.paired_with(candidate) and not options.normalize:
        recorded = baseline.pairing.get("design") or {}
        design = sequential.Design(
            alpha=options.alpha,
            max_pairs=int(recorded.get("max_pairs") or sequential.DEFAULT_MAX_PAIRS))
        return compare_paired(baseline, candidate, design, options)
    common, other_work, thresholds, mismatches = _common_and_thresholds(baseline, candidate,
                                                                        options)
    rule = stats.Rule(threshold=options.threshold or max(thresholds.values()),
                      alpha=options.alpha)
    speed = None
    if baseline.control_s and candidate.control_s:
        speed = stats.speed_ratio(baseline.control_s, candidate.control_s, rule)
    elif options.normalize:
        missing = baseline.source if not baseline.control_s else candidate.source
        raise UserError(f"--normalize needs machine-speed control samples in both runs; "
                        f"{missing} has none: drop --normalize")
    # The machine's share of the drift, divided out where this environment's saved runs
    # show how much of it the benchmarks feel; the noise is then measured the same way.
    host, estimate = host_speed.divide_out(speed, history, options.normalize)
    pairs = {k: (baseline.benchmarks[k].samples, candidate.benchmarks[k].samples)
             for k in common}
    groups = {k: candidate.benchmarks[k].group for k in common
              if candidate.benchmarks[k].group is not None}
    comparisons = _undisturbed_only(stats.compare_family(
        pairs, rule, thresholds=thresholds, groups=groups,
        speed_ratio=host.factor if host else 1.0), baseline, candidate)
    result = _result(baseline, candidate, options, common, other_work, comparisons, speed,
                     mismatches)
    code = tuple(code_differences(baseline, candidate))
    # Against every saved run of the baseline's code, read as the noise was measured.
    levels = code_level.code_levels(baseline, history, [c.name for c in comparisons],
                                    host.slope if host else 0.0)
    between = between_noise.between_runs({c.name: c.ratio for c in comparisons}, estimate.spreads,
                                         {c.name: c.threshold for c in comparisons},
                                         rule.confidence, levels)
    if not code:
        # The same code: no verdict on it. The rounds' verdicts would read as claims about
        # the code in counts, tables and plots, so each says it is the machine's.
        comparisons = tuple(dataclasses.replace(
            c, verdict=stats.Verdict.INCONCLUSIVE, rounds_needed=None,
            reason=f"same code in both runs: x{c.ratio:.3f} is the machine's")
            for c in comparisons)
    else:
        comparisons = stored.stored_verdicts(comparisons, between, options.alpha)
    return dataclasses.replace(result, comparisons=comparisons, code=code, noise=estimate,
                               between=between, host=host)


def compare_paired(baseline: Run, candidate: Run, design: sequential.Design,
                   options: GateOptions | None = None,
                   unpaired: Mapping[str, float] | None = None,
                   clearing: sequential.Design | None = None) -> GateResult:
    """Judge two runs whose rounds were taken in turn (`llmbench ab`): round i of a benchmark
    on one side pairs with round i on the other. Machine speed needs no control here: a pair
    shares its moment on the machine, so --normalize is refused. `unpaired`: benchmarks the
    A/B reached but timed no pair of (name: threshold), judged inconclusive with the rest,
    so they count in Holm's family as they did in the A/B's stopping rule. `clearing`: a
    confirmation's unsplit design, at which an undecided benchmark may be cleared."""
    options = options or GateOptions()
    if options.normalize:
        raise UserError("--normalize does not apply to a paired A/B: each pair already shares "
                        "its moment on the machine; drop it")
    common, other_work, thresholds, mismatches = _common_and_thresholds(baseline, candidate,
                                                                        options)
    pairs = {k: (baseline.benchmarks[k].samples, candidate.benchmarks[k].samples)
             for k in common}
    for name, threshold in (unpaired or {}).items():
        if name not in pairs:
            pairs[name], thresholds[name] = ((), ()), threshold
    groups = {k: candidate.benchmarks[k].group for k in common
              if candidate.benchmarks[k].group is not None}
    comparisons = sequential.judge_family(pairs, thresholds, design, groups, clearing)
    return _result(baseline, candidate, options, common, other_work, comparisons, None,
                   mismatches, design)
