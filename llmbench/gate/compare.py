"""The regression gate: two loaded runs and the options in, a verdict table and an exit code out.

`compare_runs` checks that the runs are comparable (environment, benchmarks in common),
resolves each benchmark's threshold, measures the machine-speed ratio from the control
samples, and hands the raw samples to `stats.compare_family`. `render` turns the result
into text, markdown or JSON; `GateResult.exit_code` is what the CLI and pytest report.

Inconclusive verdicts are never a silent pass: every renderer shows them in the table and
counts them in the summary line, with the rounds per side that would decide them. By
default they do not fail the gate (exit 0), because on a noisy machine a short run is
often inconclusive and a gate that fails on "could not tell" is one people learn to ignore;
`fail_on_inconclusive` (`--fail-on-inconclusive`) makes them fail it (exit 1) for users
who want every benchmark verified.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from llmbench.errors import EXIT_OK, EXIT_REGRESSION, UserError
from llmbench.gate import stats
from llmbench.runs.store import (
    EnvironmentMismatch,
    Run,
    environment_differences,
    is_same_run,
    version_differences,
)

FORMATS = ("text", "markdown", "json")
DEFAULT_ALPHA = next(f.default for f in dataclasses.fields(stats.Rule) if f.name == "alpha")


class NothingInCommon(UserError):
    """The two runs share no benchmark."""


class SameRun(UserError):
    """Both sides are one run: any verdict would only restate that it equals itself."""


def parse_fraction(text: str) -> float:
    """'10%' -> 0.10 and '0.1' -> 0.1; a bare number >= 1 is refused as ambiguous."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise ValueError(f"expected a percentage like 10% or a fraction like 0.1, "
                         f"got {text!r}") from None
    if not raw.endswith("%") and value >= 1:
        raise ValueError(f"{text!r} is ambiguous: write {raw}% for a percentage, or a "
                         "fraction below 1")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"threshold must be > 0, got {text!r}")
    return value


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

    def __post_init__(self) -> None:
        stats.Rule(alpha=self.alpha)  # validates alpha with the rule's own message
        stats.ThresholdOverrides(groups=dict(self.threshold_for), run=self.threshold)


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

    @property
    def counts(self) -> dict[str, int]:
        return stats.summarize(self.comparisons)

    def with_verdict(self, verdict: stats.Verdict) -> list[stats.Comparison]:
        return [c for c in self.comparisons if c.verdict is verdict]

    @property
    def exit_code(self) -> int:
        counts = self.counts
        failing = counts["regression"] or (self.options.fail_on_inconclusive
                                           and counts["inconclusive"])
        return EXIT_REGRESSION if failing else EXIT_OK

    @property
    def rounds_needed(self) -> tuple[int, str] | None:
        """The most rounds (or blocks) per side that an inconclusive benchmark asks for."""
        needed = [(c.rounds_needed, c.unit) for c in self.comparisons
                  if c.rounds_needed is not None]
        return max(needed, default=None)


def _resolve_overrides(run: Run, common: Sequence[str], options: GateOptions
                       ) -> stats.ThresholdOverrides:
    by_key: dict[str, float] = {}
    by_group: dict[str, float] = {}
    groups = {run.benchmarks[k].group for k in common} - {None}
    for name, value in options.threshold_for.items():
        keys = [k for k in common if name in (k, run.benchmarks[k].name)]
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


def compare_runs(baseline: Run, candidate: Run, options: GateOptions | None = None
                 ) -> GateResult:
    """Judge every benchmark the two runs share; `UserError` when they cannot be compared."""
    options = options or GateOptions()
    if is_same_run(baseline, candidate):
        which = (baseline.source if baseline.source == candidate.source
                 else f"{baseline.source} and {candidate.source}")
        raise SameRun(f"both sides are the same run ({which}: identical samples): compare "
                      "two different runs")
    mismatches = environment_differences(baseline.environment, candidate.environment)
    if mismatches and not options.allow_mismatch:
        raise EnvironmentMismatch(mismatches)
    common = [k for k in candidate.benchmarks if k in baseline.benchmarks]
    if not common:
        raise NothingInCommon(
            f"no benchmarks in common between {baseline.source} "
            f"({len(baseline.benchmarks)}) and {candidate.source} "
            f"({len(candidate.benchmarks)}): were they run with the same -k and profile?")
    device = candidate.device or baseline.device
    overrides = _resolve_overrides(candidate, common, options)
    try:
        thresholds = {k: stats.threshold_for(k, candidate.benchmarks[k].group, device or "?",
                                             overrides) for k in common}
    except ValueError:
        raise UserError(f"no default threshold for device {device!r}: pass --threshold") from None
    rule = stats.Rule(threshold=options.threshold or max(thresholds.values()),
                      alpha=options.alpha)
    speed = None
    if baseline.control_s and candidate.control_s:
        speed = stats.speed_ratio(baseline.control_s, candidate.control_s, rule)
    elif options.normalize:
        missing = baseline.source if not baseline.control_s else candidate.source
        raise UserError(f"--normalize needs machine-speed control samples in both runs; "
                        f"{missing} has none: drop --normalize")
    pairs = {k: (baseline.benchmarks[k].samples, candidate.benchmarks[k].samples)
             for k in common}
    groups = {k: candidate.benchmarks[k].group for k in common
              if candidate.benchmarks[k].group is not None}
    blocks = {k: (baseline.benchmarks[k].blocks, candidate.benchmarks[k].blocks)
              for k in common if baseline.benchmarks[k].blocks and candidate.benchmarks[k].blocks}
    comparisons = stats.compare_family(
        pairs, rule, thresholds=thresholds, groups=groups,
        speed_ratio=speed.ratio if options.normalize and speed else 1.0, blocks=blocks)
    return GateResult(
        baseline=baseline, candidate=candidate, options=options, comparisons=comparisons,
        labels=_labels(candidate, common), speed=speed,
        mismatches=tuple(mismatches) if options.allow_mismatch else (),
        versions=version_differences(baseline.environment, candidate.environment),
        only_baseline=tuple(k for k in baseline.benchmarks if k not in candidate.benchmarks),
        only_candidate=tuple(k for k in candidate.benchmarks if k not in baseline.benchmarks))


# --- Rendering ------------------------------------------------------------------------------

COLUMNS = ("benchmark", "baseline", "candidate", "ratio", "CI", "p adj", "verdict")


def _seconds(value: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if value >= scale:
            return f"{value / scale:.4g} {unit}"
    return f"{value * 1e9:.4g} ns"


def _interval(low: float, high: float) -> str:
    return f"[{low:.3f}, {'inf' if math.isinf(high) else f'{high:.3f}'}]"


def _verdict_cell(c: stats.Comparison) -> str:
    if c.verdict is stats.Verdict.INCONCLUSIVE and c.rounds_needed is not None:
        return f"inconclusive (~{c.rounds_needed} {c.unit}/side)"
    return c.verdict.value


def _rows(result: GateResult) -> list[tuple[str, ...]]:
    return [(result.labels[c.name], _seconds(c.baseline_median), _seconds(c.candidate_median),
             f"{c.ratio:.3f}", _interval(c.ci_low, c.ci_high), f"{c.p_adjusted:.2g}",
             _verdict_cell(c)) for c in result.comparisons]


def _describe(run: Run) -> str:
    commit = (run.commit_info.get("id") or "")[:8]
    dirty = "+dirty" if run.commit_info.get("dirty") else ""
    parts = [f"commit {commit}{dirty}" if commit else "", run.datetime or ""]
    extra = ", ".join(p for p in parts if p)
    return f"{run.source}" + (f" ({extra})" if extra else "")


def header_lines(result: GateResult) -> list[str]:
    """What was compared and under which conditions, one fact a line."""
    env = result.candidate.environment or {}
    lines = [f"baseline:  {_describe(result.baseline)}",
             f"candidate: {_describe(result.candidate)}"]
    if env:
        lines.append(f"environment: {env.get('model')} on {env.get('device')} "
                     f"({env.get('device_name')}), {env.get('dtype')}, "
                     f"{env.get('threads')} threads")
    if result.versions:
        diffs = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in result.versions.items())
        lines.append(f"versions differ (allowed): {diffs}")
    else:
        lines.append("versions: same")
    if result.mismatches:
        lines.append("ENVIRONMENT MISMATCH (allowed by --allow-mismatch): "
                     + "; ".join(result.mismatches))
    s = result.speed
    if s is None:
        lines.append("machine speed: unknown (no control samples in a run)")
    else:
        state = ("divided out (--normalize)" if result.options.normalize
                 else "not divided out; --normalize would")
        lines.append(f"machine speed (control, candidate/baseline): {s.ratio:.3f} "
                     f"{_interval(s.ci_low, s.ci_high)}, {state}")
    by_blocks = [c for c in result.comparisons if c.unit == "blocks"]
    if by_blocks:
        kb, kc = by_blocks[0].n_blocks
        lines.append(f"judged on block medians ({kb} vs {kc} blocks, Welch's t): rounds of one "
                     f"block are not independent draws")
    o = result.options
    thresholds = sorted({c.threshold for c in result.comparisons})
    shown = ", ".join(f"{t:.0%}" if round(t * 100, 6).is_integer() else f"{t:.1%}"
                      for t in thresholds)
    lines.append(f"rule: threshold {shown}, alpha {o.alpha:g} (Holm over "
                 f"{len(result.comparisons)} benchmarks), CI {1 - 2 * o.alpha:.0%}")
    return lines


def summary_line(result: GateResult) -> str:
    """One line: the outcome, every verdict counted, and what inconclusive means here."""
    n = result.counts
    total = len(result.comparisons)
    if n["regression"]:
        outcome = "REGRESSION"
    elif n["inconclusive"] and result.options.fail_on_inconclusive:
        outcome = "FAIL (inconclusive, --fail-on-inconclusive)"
    elif n["inconclusive"]:
        outcome = "PASS, NOT VERIFIED"
    else:
        outcome = "PASS"
    counts = (f"{n['regression']} regression, {n['improvement']} improvement, "
              f"{n['unchanged']} unchanged, {n['inconclusive']} inconclusive of {total}")
    line = f"{outcome}: {counts}"
    if n["inconclusive"]:
        most, unit = result.rounds_needed
        line += f" (inconclusive is not a pass: up to ~{most} {unit}/side would decide)"
    skipped = len(result.only_baseline) + len(result.only_candidate)
    if skipped:
        line += f"; {skipped} benchmarks in one run only, not compared"
    return line


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    left = {0, len(header) - 1}

    def fmt(row):
        return "  ".join(cell.ljust(w) if i in left else cell.rjust(w)
                         for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()

    return [fmt(header), "  ".join("-" * w for w in widths), *map(fmt, rows)]


def _one_side_notes(result: GateResult, limit: int = 4) -> list[str]:
    notes = []
    for side, keys in (("baseline", result.only_baseline), ("candidate", result.only_candidate)):
        if keys:
            shown = ", ".join(keys[:limit]) + (f" and {len(keys) - limit} more (--format json "
                                               "lists them)" if len(keys) > limit else "")
            notes.append(f"{len(keys)} only in the {side} run, not compared: {shown}")
    return notes


def render_text(result: GateResult) -> str:
    lines = header_lines(result)
    lines += ["", *_table(COLUMNS, _rows(result)), ""]
    lines += _one_side_notes(result)
    lines.append(summary_line(result))
    return "\n".join(lines)


def render_markdown(result: GateResult) -> str:
    def esc(cell: str) -> str:
        return cell.replace("|", "\\|")

    lines = ["### llmbench regression gate", ""]
    lines += [f"- {esc(line)}" for line in header_lines(result)]
    lines += ["", "| " + " | ".join(COLUMNS) + " |",
              "|" + "|".join([":--"] + ["--:"] * (len(COLUMNS) - 2) + [":--"]) + "|"]
    for row in _rows(result):
        cells = [f"`{esc(row[0])}`", *map(esc, row[1:-1])]
        verdict = row[-1]
        cells.append(f"**{verdict}**" if not verdict.startswith("unchanged") else verdict)
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines += [f"- {esc(note)}" for note in _one_side_notes(result)]
    lines.append(f"**{esc(summary_line(result))}**")
    return "\n".join(lines)


def _finite(value: float):
    return value if math.isfinite(value) else None  # JSON has no infinity


def to_json(result: GateResult) -> dict:
    o = result.options
    s = result.speed
    return {
        "baseline": result.baseline.source,
        "candidate": result.candidate.source,
        "options": {"threshold": o.threshold, "threshold_for": dict(o.threshold_for),
                    "alpha": o.alpha, "normalize": o.normalize,
                    "allow_mismatch": o.allow_mismatch,
                    "fail_on_inconclusive": o.fail_on_inconclusive},
        "environment": result.candidate.environment,
        "mismatches": list(result.mismatches),
        "versions": {k: list(v) for k, v in result.versions.items()},
        "speed": None if s is None else {**dataclasses.asdict(s), "ci_high": _finite(s.ci_high)},
        "comparisons": [{**dataclasses.asdict(c), "unit": c.unit, "label": result.labels[c.name],
                         "verdict": c.verdict.value, "ci_high": _finite(c.ci_high)}
                        for c in result.comparisons],
        "only_baseline": list(result.only_baseline),
        "only_candidate": list(result.only_candidate),
        "counts": result.counts,
        "summary": summary_line(result),
        "exit_code": result.exit_code,
    }


def render(result: GateResult, fmt: str = "text") -> str:
    if fmt == "json":
        return json.dumps(to_json(result), indent=2)
    if fmt == "markdown":
        return render_markdown(result)
    assert fmt == "text", fmt
    return render_text(result)
