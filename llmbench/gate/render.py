"""The gate's result as text (the terminal, pytest's failure body), markdown (a pull request
comment, the report's header) or JSON (scripts): one header of what was compared under which
conditions, one verdict table, one summary line that counts every verdict."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence

from llmbench.gate import stats, stored
from llmbench.gate.compare import GateResult, Judged
from llmbench.gate.confirmation import Family, HostMove
from llmbench.gate.memory import MemoryStatus
from llmbench.gate.work import WorkFinding, WorkStatus, differing, rule_words, tally
from llmbench.runs.code import code_of
from llmbench.runs.environment import environment_field
from llmbench.runs.model import Run

FORMATS = ("text", "markdown", "json")

COLUMNS = ("benchmark", "baseline", "candidate", "ratio", "CI", "p adj", "work", "verdict")

_WORK_CELL = {WorkStatus.UNCHANGED: "same", WorkStatus.CHANGED: "changed",
              WorkStatus.MORE: "MORE", WorkStatus.LESS: "less", WorkStatus.NOT_COUNTED: "-"}


def format_seconds(value: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if value >= scale:
            return f"{value / scale:.4g} {unit}"
    return f"{value * 1e9:.4g} ns"


def _interval(low: float, high: float) -> str:
    return f"[{low:.3f}, {'inf' if math.isinf(high) else f'{high:.3f}'}]"


def significant_shift(result: GateResult, c: stats.Comparison) -> str | None:
    """'slower by 7%-10%' when a benchmark that is unchanged or inconclusive still moved
    significantly (its interval excludes 1: within the threshold, or straddling it); None
    otherwise. A stored comparison says so only where the rounds and the noise between runs
    both exclude 1 the same way, and gives the interval against the noise between runs (read
    against the baseline code's level, `code_level`)."""
    if c.verdict not in (stats.Verdict.UNCHANGED, stats.Verdict.INCONCLUSIVE,
                         stats.Verdict.NOT_SLOWER) or result.same_code:
        return None
    low, high = c.ci_low, c.ci_high
    if result.judged is not Judged.PAIRED and not c.n_pairs:
        between = result.between.get(c.name)
        if not stored.shift(c, between):
            return None
        low, high = between.ci_low, between.ci_high
    if low > 1:
        return f"slower by {low - 1:.0%}-{high - 1:.0%}" if math.isfinite(high) else None
    if high < 1:
        return f"faster by {1 - high:.0%}-{1 - low:.0%}"
    return None


def _verdict_cell(result: GateResult, c: stats.Comparison) -> str:
    if result.same_code:
        return "same code"
    notes = [n for n in (significant_shift(result, c),) if n]
    if c.verdict is stats.Verdict.INCONCLUSIVE and c.rounds_needed is not None:
        notes.append(f"~{c.rounds_needed} {c.unit}{c.per_side}")
    return c.verdict.value + (f" ({', '.join(notes)})" if notes else "")


def _rows(result: GateResult) -> list[tuple[str, ...]]:
    work = {f.name: _WORK_CELL[f.status] for f in result.work}
    return [(result.labels[c.name], format_seconds(c.baseline_median),
             format_seconds(c.candidate_median),
             f"{c.ratio:.3f}", _interval(c.ci_low, c.ci_high), f"{c.p_adjusted:.2g}",
             work.get(c.name, "-"), _verdict_cell(result, c)) for c in result.comparisons]


def _work_consequence(result: GateResult, finding: WorkFinding) -> str:
    if not finding.is_regression:
        return ""
    if result.work_versions:
        return " (not gated: versions differ)"
    return " (fails the gate)" if result.options.work_gate else " (not gated: --no-work-gate)"


def work_lines(result: GateResult) -> list[str]:
    """Each case whose counted work differs, with the ops that changed most, then one line
    counting every case; printed whatever the timing verdicts."""
    if not result.work:
        return []
    lines = [f"work: {result.labels.get(f.name, f.name)}: {f.status.value}: {f.describe()}"
             f"{_work_consequence(result, f)}" for f in differing(result.work)]
    counted = [f for f in result.work if f.status is not WorkStatus.NOT_COUNTED]
    line = f"work counted: {tally(result.work)}"
    if result.work_versions:
        line += f" (never fails the gate here: {', '.join(result.work_versions)})"
    elif counted:
        rule = (f"{rule_words(result.options.work_threshold)} fails"
                if result.options.work_gate else "--no-work-gate: shown, never fails")
        line += f"; {rule}"
    not_counted = [f for f in result.work if f.status is WorkStatus.NOT_COUNTED]
    if not_counted:
        reasons = sorted({f.reason for f in not_counted})
        line += f"; not counted: {'; '.join(reasons)}"
    return [*lines, line]


def memory_lines(result: GateResult) -> list[str]:
    """Each case whose own peak memory moved beyond the threshold, then one line counting."""
    if not result.memory:
        return []
    moved = [f for f in result.memory if f.status in (MemoryStatus.MORE, MemoryStatus.LESS)]
    consequence = ("" if result.same_code else " (fails the gate)")
    lines = [f"memory: {result.labels.get(f.name, f.name)}: {f.status.value}: {f.describe()}"
             + (consequence if f.is_regression else "") for f in moved]
    counts: dict[str, int] = {}
    for f in result.memory:
        counts[f.status.value] = counts.get(f.status.value, 0) + 1
    threshold = result.options.memory_threshold
    lines.append("peak memory per case: " + ", ".join(f"{n} {k}" for k, n in counts.items())
                 + f"; more than +{threshold:.0%} fails")
    return lines


def _describe(run: Run) -> str:
    commit = (run.commit_info.get("id") or "")[:8]
    dirty = "+dirty" if run.commit_info.get("dirty") else ""
    parts = [f"commit {commit}{dirty}" if commit else "", run.datetime or ""]
    extra = ", ".join(p for p in parts if p)
    return f"{run.source}" + (f" ({extra})" if extra else "")


def _commit(run: Run) -> str:
    return (code_of(run).commit or "")[:8] or "BASELINE_COMMIT"


def _machine_words(result: GateResult) -> str:
    """How far the same code moved between the two runs: the machine's share."""
    ratios = sorted(c.ratio for c in result.comparisons)
    if not ratios:
        return "nothing timed in common"
    middle = sorted(abs(math.log(r)) for r in ratios)[len(ratios) // 2]
    return (f"every difference is the machine's (ratios x{ratios[0]:.3f} to x{ratios[-1]:.3f}, "
            f"median move {math.expm1(middle):.1%}); kept as an observation of the noise "
            "between runs")


def noise_line(result: GateResult) -> str | None:
    """What the noise between runs is known to be, and the smallest regression a stored
    comparison can call against it; None when the comparison is paired."""
    if result.judged is Judged.PAIRED:
        return None
    estimate = result.noise
    commit = _commit(result.baseline)
    if estimate is None or not estimate.spreads:
        return ("noise between runs: not measured yet (no two saved runs of one code in this "
                "environment), so the smallest change a stored comparison can tell apart from "
                "the machine's drift is unknown; run unchanged code again to measure it, or "
                f"`llmbench ab {commit}` for a paired verdict now")
    smallest = sorted(b.smallest_regression for b in result.between.values())
    levels = {b.level_runs for b in result.between.values()}
    most = max(levels, default=1)
    against = (f", against {'up to ' if len(levels) > 1 else ''}{most} saved runs of {commit}"
               if most > 1 else "")
    reach = (f"; a stored comparison calls a regression from x{smallest[len(smallest) // 2]:.2f}"
             f" (median benchmark; x{smallest[0]:.2f} to x{smallest[-1]:.2f}{against}), smaller "
             f"changes need `llmbench ab {commit}`" if smallest else "")
    divided = (", the machine's speed divided out" if result.host is not None
               and result.host.divided_out else "")
    return (f"noise between runs: from {estimate.runs} saved runs of {estimate.groups} "
            f"code{'s' if estimate.groups != 1 else ''} ({estimate.observations} A/A "
            f"observation{'s' if estimate.observations != 1 else ''}{divided}){reach}")


def disturbance_line(result: GateResult) -> str | None:
    """How many rounds other work disturbed in each run (left out of the verdicts); None when
    neither run recorded it (runs older than the record)."""
    parts = []
    for side, run in (("baseline", result.baseline), ("candidate", result.candidate)):
        counts = [b.disturbed_rounds for b in run.benchmarks.values()
                  if b.disturbed_rounds is not None]
        if not counts:
            continue
        hit = [n for n in counts if n]
        every = [b for b in run.benchmarks.values() if b.all_disturbed]
        parts.append(f"{side} {sum(hit)} rounds in {len(hit)} of {len(counts)} benchmarks"
                     + (f", {len(every)} with every round disturbed (no verdict)"
                        if every else "") if hit else f"{side} none")
    if not parts:
        return None
    return ("rounds disturbed by other work (left out, re-measured where the run could): "
            + "; ".join(parts))


def code_lines(result: GateResult) -> list[str]:
    """Whether the two runs measured the same code, the noise between runs, and the paired
    A/B that settled what the stored runs could not."""
    if result.judged is Judged.PAIRED:
        return []
    lines = []
    if result.same_code:
        lines.append("code: the same in both runs (one commit, clean tree, same versions): no "
                     "verdict on the code, every difference is the machine's")
    else:
        lines.append(f"code differs: {'; '.join(result.code)}")
    if not result.same_code and (line := noise_line(result)) is not None:
        lines.append(line)
    conf = result.confirmation
    if conf is not None and conf.ran:
        undecided = set(conf.undecided)
        cleared = set(conf.host_move.cleared) if conf.host_move is not None else set()
        left = [name for name in conf.left if name not in undecided and name not in cleared]
        unreached = len([name for name in conf.left if name in undecided
                         and name not in cleared])
        lines.append(f"confirmed by a paired A/B against {conf.against[:8]}: "
                     f"{len(conf.benchmarks)} benchmarks in "
                     f"{conf.seconds or 0:.0f} s; their verdicts are the A/B's"
                     + (f"; {conf.cleared} cleared (their pairs rule out a regression at "
                        f"alpha {result.options.alpha:g}, one test that none is past the "
                        "threshold)" if conf.cleared else "")
                     + _family_words(conf.family)
                     + _move_words(conf.host_move)
                     + (f"; {len(left)} more slower benchmark(s) its budget did not "
                        "reach are not confirmed" if left else "")
                     + (f"; {unreached} the stored runs could not decide were not reached "
                        "and stay inconclusive" if unreached else ""))
    elif conf is not None:
        lines.append(f"not confirmed by a paired A/B: {conf.why}")
    return lines


def _move_words(moved: HostMove | None) -> str:
    """The machine's move the pairs measured (`gate.host_move`), for the confirmation's
    line."""
    if moved is None or not moved.judged:  # nothing left for it to decide
        return ""
    scatter = (f", its readings scattering x{math.exp(moved.tau):.3f} beyond their noise"
               if moved.tau > 0 else "")
    beyond = " beyond the control's share" if moved.beyond_control else ""
    return (f"; the machine moved x{moved.ratio:.3f}{beyond} between the runs (stored over paired "
            f"ratios of {len(moved.readings)} benchmarks{scatter}): over it, "
            f"{len(moved.cleared)} of the {len(moved.judged)} candidates no pair decided are "
            "not slower")


def _family_words(together: Family | None) -> str:
    """What the family decided together (`gate.family`), for the confirmation's line."""
    if together is None:
        return ""
    parts = []
    if together.benchmarks or not together.decided_alone:
        parts.append(f"{len(together.benchmarks)} slower benchmark(s) decided together "
                     f"({together.pairs} pairs each, a closed test at alpha "
                     f"{together.alpha:.2g}): {len(together.regression)} named a regression")
    if (alone := len(together.decided_alone)):
        parts.append(f"{alone} {'more ' if parts else ''}slower benchmark(s) left the family "
                     "after its pairs to be decided alone, their pairs pointing at a "
                     "regression")
    return "".join(f"; {part}" for part in parts)


def header_lines(result: GateResult) -> list[str]:
    """What was compared and under which conditions, one fact a line."""
    env = result.candidate.environment or {}
    lines = [f"baseline:  {_describe(result.baseline)}",
             f"candidate: {_describe(result.candidate)}"]
    if env:
        lines.append(f"environment: {env.get('model')} on {env.get('device')} "
                     f"({env.get('device_name')}), {env.get('dtype')}, "
                     f"{env.get('threads')} threads, rounds in "
                     f"{environment_field(env, 'passes')} pass(es)")
    if result.versions:
        diffs = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in result.versions.items())
        lines.append(f"versions differ (allowed): {diffs}")
    else:
        lines.append("versions: same")
    if result.mismatches:
        lines.append("ENVIRONMENT MISMATCH (allowed by --allow-mismatch): "
                     + "; ".join(result.mismatches))
    lines += code_lines(result)
    if (line := disturbance_line(result)) is not None:
        lines.append(line)
    s = result.speed
    if result.design is not None:
        lines.append("machine speed: shared by both rounds of each pair, so no control is "
                     "needed")
    elif s is None:
        lines.append("machine speed: unknown (no control samples in a run)")
    else:
        host = result.host
        state = (host.why if host is not None and host.divided_out else
                 f"{host.why if host is not None else 'not divided out'}; --normalize "
                 "divides it out in full")
        lines.append(f"machine speed (control, candidate/baseline): {s.ratio:.3f} "
                     f"{_interval(s.ci_low, s.ci_high)}, {state}")
    paired = [c for c in result.comparisons if c.unit == "pairs"]
    if paired:
        used = sorted(c.n_pairs for c in paired)
        if result.design is not None:
            lines.append(f"judged on pairs of rounds taken in turn ({used[0]}-{used[-1]} pairs "
                         f"a benchmark, {sum(used)} in all): signed-rank test on log-ratios, "
                         f"{result.sequential}")
        else:  # stored runs whose slower benchmarks a paired A/B settled (`confirmation`)
            lines.append(f"{len(paired)} benchmark(s) settled on pairs of rounds taken in turn "
                         f"({used[0]}-{used[-1]} pairs a benchmark): signed-rank test on "
                         "log-ratios, with the A/B's own intervals")
    o = result.options
    thresholds = sorted({c.threshold for c in result.comparisons})
    shown = ", ".join(f"{t:.0%}" if round(t * 100, 6).is_integer() else f"{t:.1%}"
                      for t in thresholds)
    confidence = result.confidence if paired and result.design else 1 - 2 * o.alpha
    settled = " (the settled rows: the A/B's)" if paired and result.design is None else ""
    lines.append(f"rule: threshold {shown}, alpha {o.alpha:g} (Holm over "
                 f"{len(result.comparisons)} benchmarks), CI {confidence:.1%}{settled}")
    return lines


def summary_line(result: GateResult) -> str:
    """One line: the outcome, every verdict counted, and what inconclusive means here."""
    n = result.counts
    total = len(result.comparisons)
    if result.same_code:
        line = f"SAME CODE: no verdict on the code; {_machine_words(result)}"
        if result.work_regressions:
            line = (f"REGRESSION: {len(result.work_regressions)} with more work, although "
                    f"both runs measured the same code; {_machine_words(result)}")
        return line
    not_confirmed = n[stats.Verdict.NOT_CONFIRMED.value]
    not_slower = n[stats.Verdict.NOT_SLOWER.value]
    if n["regression"] or result.work_regressions or result.memory_regressions:
        outcome = "REGRESSION"
    elif n["inconclusive"] and result.options.fail_on_inconclusive:
        outcome = "FAIL (inconclusive, --fail-on-inconclusive)"
    elif not_confirmed:
        outcome = "NOT CONFIRMED"
    elif n["inconclusive"]:
        outcome = "PASS, NOT VERIFIED"
    else:
        outcome = "PASS"
    counts = (f"{n['regression']} regression, {n['improvement']} improvement, "
              f"{n['unchanged']} unchanged"
              + (f", {not_slower} not slower" if not_slower else "")
              + f", {n['inconclusive']} inconclusive"
              + (f", {not_confirmed} not confirmed" if not_confirmed else "") + f" of {total}")
    line = f"{outcome}: {counts}"
    if result.work_regressions:
        line += f"; {len(result.work_regressions)} with more work"
    if result.memory_regressions:
        line += f"; {len(result.memory_regressions)} with more peak memory"
    slower = [c for c in result.comparisons
              if (shift := significant_shift(result, c)) and shift.startswith("slower")]
    if slower:
        line += (f"; {len(slower)} significantly slower, not proven beyond the threshold "
                 f"({_listed([result.labels[c.name] for c in slower], 3)})")
    if not_confirmed:
        line += (" (not confirmed is not a pass: slower in these two runs, and neither "
                 "confirmed by a paired A/B nor proven beyond the noise between runs; a "
                 "paired A/B decides)")
    if n["inconclusive"] and result.rounds_needed is not None:
        most, unit = result.rounds_needed
        per_side = "" if unit == "pairs" else "/side"
        line += f" (inconclusive is not a pass: up to ~{most} {unit}{per_side} would decide)"
    elif n["inconclusive"] and result.judged is Judged.STORED:
        # Stored runs whose noise between them, not their rounds, leaves them undecided.
        line += (" (inconclusive is not a pass: more rounds cannot settle the noise between "
                 f"two runs; `llmbench ab {_commit(result.baseline)}` decides)")
    skipped = len(result.only_baseline) + len(result.only_candidate)
    if skipped:
        line += f"; {skipped} benchmarks in one run only, not compared"
    if result.other_work:
        line += f"; {len(result.other_work)} did other work in the two runs, not compared"
    return line


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str
                   ) -> list[str]:
    """The one markdown table writer: `align` is "<" (left) or ">" (right) for each column;
    a "|" in a cell is escaped, so no cell can break its row."""
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    rule = {"<": ":--", ">": "--:"}
    return [line(header), "|" + "|".join(rule[a] for a in align) + "|", *map(line, rows)]


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    left = {0, len(header) - 1}

    def fmt(row):
        return "  ".join(cell.ljust(w) if i in left else cell.rjust(w)
                         for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()

    return [fmt(header), "  ".join("-" * w for w in widths), *map(fmt, rows)]


def _listed(items: Sequence[str], limit: int) -> str:
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more (--format json lists "
                                       "them)" if len(items) > limit else "")


def _one_side_notes(result: GateResult, limit: int = 4) -> list[str]:
    """The benchmarks not compared, and why: in one run only, or doing other work."""
    notes = [f"{len(keys)} only in the {side} run, not compared: {_listed(keys, limit)}"
             for side, keys in (("baseline", result.only_baseline),
                                ("candidate", result.only_candidate)) if keys]
    if result.other_work:
        items = [f"{k} ({how})" for k, how in result.other_work.items()]
        notes.append(f"{len(items)} did other work in the two runs (baseline vs candidate; "
                     f"another profile?), not compared: {_listed(items, limit)}")
    return notes


def render_text(result: GateResult) -> str:
    lines = header_lines(result)
    lines += ["", *text_table(COLUMNS, _rows(result)), ""]
    lines += work_lines(result)
    lines += memory_lines(result)
    lines += _one_side_notes(result)
    lines.append(summary_line(result))
    return "\n".join(lines)


def render_markdown(result: GateResult) -> str:
    def esc(cell: str) -> str:
        return cell.replace("|", "\\|")

    lines = ["### llmbench regression gate", ""]
    lines += [f"- {esc(line)}" for line in header_lines(result)]
    rows = [[f"`{row[0]}`", *row[1:-1],
             row[-1] if row[-1].startswith("unchanged") else f"**{row[-1]}**"]
            for row in _rows(result)]
    lines += ["", *markdown_table(COLUMNS, rows, "<" + ">" * (len(COLUMNS) - 2) + "<"), ""]
    lines += [f"- {esc(note)}" for note in [*work_lines(result), *memory_lines(result),
                                            *_one_side_notes(result)]]
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
                    "fail_on_inconclusive": o.fail_on_inconclusive,
                    "work_threshold": o.work_threshold, "work_gate": o.work_gate,
                    "memory_threshold": o.memory_threshold},
        "environment": result.candidate.environment,
        "mismatches": list(result.mismatches),
        "versions": {k: list(v) for k, v in result.versions.items()},
        "speed": None if s is None else {**dataclasses.asdict(s), "ci_high": _finite(s.ci_high)},
        "host": None if result.host is None else {
            "control_ratio": result.host.control_ratio, "slope": result.host.slope,
            "factor": result.host.factor, "why": result.host.why},
        "comparisons": [{**dataclasses.asdict(c), "unit": c.unit, "label": result.labels[c.name],
                         "verdict": c.verdict.value, "ci_high": _finite(c.ci_high)}
                        for c in result.comparisons],
        "work": [f.to_json() for f in result.work],
        "work_gated": bool(result.options.work_gate and not result.work_versions),
        "work_regressions": [f.name for f in result.work_regressions],
        "memory": [{"name": f.name, "status": f.status.value, "baseline": f.baseline_bytes,
                    "candidate": f.candidate_bytes} for f in result.memory],
        "memory_regressions": [f.name for f in result.memory_regressions],
        "only_baseline": list(result.only_baseline),
        "only_candidate": list(result.only_candidate),
        "other_work": dict(result.other_work),
        "code": None if result.code is None else list(result.code),
        "same_code": result.same_code,
        "noise": None if result.noise is None else {
            "runs": result.noise.runs, "codes": result.noise.groups,
            "observations": result.noise.observations,
            "prior_df": _finite(result.noise.prior_df), "slope": result.noise.slope,
            "spreads": {k: {**dataclasses.asdict(v), "df": _finite(v.df)}
                        for k, v in result.noise.spreads.items()}},
        "between": {k: dataclasses.asdict(v) for k, v in result.between.items()},
        # The settled rows are the table's own: the record without the A/B's copy of them.
        "confirmation": None if result.confirmation is None else {
            k: v for k, v in result.confirmation.to_json().items() if k != "comparisons"},
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
