"""report.md as text: a table per benchmark group (median, IQR, tokens/s, ms/token, TTFT and
ITL where recorded, and the gate's verdicts against a baseline), each case's counted work,
the plots, and both runs' environments side by side."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping

from llmbench import gate
from llmbench.gate.render import format_seconds, markdown_table
from llmbench.gate.stats import Verdict
from llmbench.report.plots import PlotOutcome
from llmbench.report.verdict_plot import FILE as VERDICTS_FILE
from llmbench.report.work_table import work_table
from llmbench.runs import (
    FIELD_DEFAULTS,
    MATCHED_FIELDS,
    Benchmark,
    Run,
    environment_field,
    is_number,
    median,
)

# Groups whose rate is per prompt token: prefill is one parallel pass over the prompt.
PROMPT_RATE_GROUPS = ("prefill",)


def _fmt(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _rates(bench: Benchmark, per_prompt_token: bool) -> tuple[float | None, float | None]:
    """(tokens/s, ms/token): of generated tokens, or of prompt tokens for prefill."""
    if not per_prompt_token:
        return bench.tokens_per_second, bench.ms_per_token
    count = bench.value("input_tokens")
    if not is_number(count) or count <= 0:
        return None, None
    return count / bench.median_s, 1e3 * bench.median_s / count


def _verdict_cells(c, other_work: str | None = None) -> list[str]:
    if other_work is not None:
        return ["–", "–", f"did other work: {other_work}"]
    if c is None:
        return ["–", "–", "not in the baseline"]
    high = "inf" if math.isinf(c.ci_high) else f"{c.ci_high:.3f}"
    verdict = c.verdict.value
    if c.verdict is Verdict.REGRESSION:
        verdict = "**regression**"
    elif c.rounds_needed is not None:
        verdict += f" (~{c.rounds_needed} {c.unit}{c.per_side})"
    return [format_seconds(c.baseline_median), f"{c.ratio:.3f} [{c.ci_low:.3f}, {high}]", verdict]


# Metrics a case may record beside its time (extra_info), as report columns: key, heading,
# format. The serving overhead is the client's ITL over the server's own decode pace.
EXTRA_COLUMNS = (("ttft_ms", "TTFT (ms)", ",.1f"), ("itl_ms", "ITL (ms)", ",.1f"),
                 ("serving_overhead", "serving overhead (×)", ".2f"))


def group_table(benches: list[Benchmark], result: gate.GateResult | None) -> list[str]:
    """One markdown table for one group's benchmarks."""
    per_prompt = benches[0].group in PROMPT_RATE_GROUPS
    extras = [(k, label, f) for k, label, f in EXTRA_COLUMNS
              if any(b.metric(k) is not None for b in benches)]
    head = ["benchmark", "rounds", "median", "IQR",
            *(["prompt tokens/s", "ms/prompt token"] if per_prompt else ["tokens/s", "ms/token"]),
            *(label for _, label, _ in extras)]
    align = "<" + ">" * (len(head) - 1)
    if result is not None:
        head += ["baseline median", "ratio [CI]", "verdict"]
        align += ">><"
        by_key = {c.name: c for c in result.comparisons}
    rows = []
    for b in benches:
        metrics = [(b.metric(k), f) for k, _, f in extras]
        row = [f"`{b.name}`", str(b.rounds), format_seconds(b.median_s),
               format_seconds(b.iqr_s), *(_fmt(v, d) for v, d in zip(_rates(b, per_prompt), (1, 2),
                                                                   strict=True)),
               *("–" if m is None else format(m[0], f) for m, f in metrics)]
        if result is not None:
            row += _verdict_cells(by_key.get(b.key), result.other_work.get(b.key))
        rows.append(row)
    return markdown_table(head, rows, align)


def _env_value(value) -> str:
    if value is None or value == {} or value == []:
        return "–"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={_env_value(v)}" for k, v in value.items())
    if isinstance(value, list) and all(is_number(v) for v in value):
        return f"{len(value)} rounds, median {format_seconds(median(value))}"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _fingerprint(fp) -> str:
    """The model's identity in a line: architecture, size, dtype, and a hash of the rest."""
    if not isinstance(fp, Mapping):
        return _env_value(fp)
    parts = [str(fp[k]) for k in ("architecture", "dtype") if fp.get(k)]
    if is_number(n := fp.get("num_parameters")):
        size = next((f"{n / s:.3g}{u}" for s, u in ((1e9, "B"), (1e6, "M"), (1e3, "k"))
                     if n >= s), f"{n:g}")
        parts.insert(min(1, len(parts)), f"{size} parameters")
    source = fp.get("source")
    if isinstance(source, Mapping):
        source = source.get("kind") or source.get("path") or source.get("repo")
    digest = hashlib.sha256(json.dumps(fp, sort_keys=True, default=str).encode()).hexdigest()
    return ", ".join(parts + ([f"from {source}"] if source else []) + [f"sha256 {digest[:12]}"])


def _environment_rows(run: Run) -> dict[str, str]:
    env, section = run.environment or {}, run.info
    rows = {k: _env_value(env.get(k)) for k in ("model", "device", "device_name", "dtype",
                                                "threads")}
    # The engine configuration and passes; a run saved before these were recorded ran the
    # defaults.
    rows.update({k: _env_value(environment_field(env, k)) for k in FIELD_DEFAULTS})
    rows["fingerprint"] = _fingerprint(env.get("fingerprint"))
    rows.update({f"version: {k}": str(v) for k, v in (env.get("versions") or {}).items()})
    rows["thread env"] = _env_value(env.get("thread_env"))
    for key, label in (("profile", "profile"), ("rounds", "rounds"),
                       ("warmup_rounds", "warm-up rounds"), ("shuffle_seed", "shuffle seed"),
                       ("load_s", "model load (s)"), ("warmup_s", "warm-up (s)"),
                       ("control_s", "control workload")):
        rows[label] = _env_value(section.get(key))
    commit = run.commit_info
    rows["commit"] = (str(commit.get("id") or "–")[:12] + (" (dirty)" if commit.get("dirty")
                                                           else ""))
    rows["date"] = str(run.datetime or "–")
    return rows


def environment_table(run: Run, baseline: Run | None) -> list[str]:
    mine = _environment_rows(run)
    if baseline is None:
        return markdown_table(["field", "run"], list(mine.items()), "<<")
    theirs = _environment_rows(baseline)
    rows = []
    for key in [*mine, *(k for k in theirs if k not in mine)]:
        a, b = mine.get(key, "–"), theirs.get(key, "–")
        mark = " **≠**" if a != b and key in MATCHED_FIELDS else ""
        rows.append([f"{key}{mark}", a, b])
    return markdown_table(["field", "run", "baseline"], rows, "<<<")


def render_markdown(run: Run, result: gate.GateResult | None, baseline: Run | None,
                    outcomes: tuple[PlotOutcome, ...]) -> str:
    lines = [f"# llmbench report: {run.title}", ""]
    if result is None:
        env = _environment_rows(run)
        lines += [f"Run: `{run.source}` (commit {env['commit']}, {env['date']}). No baseline: "
                  "pass `--baseline B.json` for verdicts."]
    else:
        if result.comparisons:  # the picture a reviewer looks at first
            lines += [f"![Verdicts: each benchmark's ratio and CI against its threshold band]"
                      f"({VERDICTS_FILE})", ""]
        lines += [f"- {line}" for line in gate.header_lines(result)]
        lines += ["", f"**{gate.summary_line(result)}**", "", "Ratio = median(run) / "
                  "median(baseline), > 1 is slower; a regression needs a Holm-significant rank "
                  "test and the whole CI beyond the threshold (see `llmbench compare`)."]
    for group, benches in run.groups().items():
        lines += ["", f"## {group}", "", *group_table(benches, result)]
    if work := work_table(run, result):
        lines += ["", "## Work per case", "", "What one round dispatches, counted at the "
                  "dispatcher: the same on every machine, so any difference is the code's "
                  "(or the libraries')." + (" More than the work threshold fails the gate."
                                           if result else ""), "", *work]
    lines += ["", "## Plots", "", "Points and bars are medians; whiskers span the fastest to "
              "the slowest round (server TTFT and ITL: the range of the percentiles recorded)."
              + (" The baseline is dashed with hollow markers, or hatched." if result else "")]
    for o in outcomes:
        if o.path is not None:
            lines += ["", f"### {o.title}", "", o.description, "", f"![{o.title}]({o.file})"]
    if skipped := [o for o in outcomes if o.path is None]:
        lines += ["", "Not drawn:", "", *(f"- `{o.file}` ({o.title}): {o.skipped}"
                                          for o in skipped)]
    lines += ["", "## Environment", "", *environment_table(run, baseline)]
    return "\n".join(lines) + "\n"

