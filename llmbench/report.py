"""`llmbench report`: a saved run (and optionally a baseline) -> report.md and PNG plots.

report.md has, per benchmark group, a table of median, IQR, tokens/s and ms/token (TTFT and
ITL where recorded); with a baseline, each row adds the baseline median, the ratio of medians
with its CI and the verdict, judged by the regression gate (`gate.compare_runs`, the same
rule and header as `llmbench compare`). Then the plots (drawn by `plots`), then both runs'
environments side by side. An existing report is never overwritten unless asked to.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from . import baselines, gate, plots
from .errors import UserError

REPORT_NAME = "report.md"
# Groups in the order the report shows them; any other group follows, alphabetically.
GROUP_ORDER = ("output-sweep", "input-sweep", "prefill", "decode", "kv-cache", "batch-size",
               "sequential-vs-batched", "engines", "server-generate", "server-stream",
               "server-concurrency")
# Named conditions in reading order, the reference first; other names sort alphabetically.
CATEGORY_ORDER = ("sequential", "batched", "loop", "hf")
# Groups whose rate is per prompt token: prefill is one parallel pass over the prompt.
PROMPT_RATE_GROUPS = ("prefill",)
_STATS = ("min", "max", "median", "iqr", "rounds")


def _is_number(value) -> bool:
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
        if _is_number(raw) and tails:  # the median, with other percentiles beside it
            raw = {"p50": raw, **tails}
        elif raw is None:
            raw = tails
        if _is_number(raw):
            return float(raw), float(raw), float(raw)
        if isinstance(raw, list) and raw and all(_is_number(v) for v in raw):  # raw samples
            ordered = sorted(map(float, raw))
            return ordered[len(ordered) // 2], ordered[0], ordered[-1]
        if not isinstance(raw, Mapping):
            return None
        summary = {str(k).lower(): float(v) for k, v in raw.items() if _is_number(v)}
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
        return float(value) if _is_number(value) else None

    @property
    def ms_per_token(self) -> float | None:
        value = self.extra.get("ms_per_token")
        return float(value) if _is_number(value) else None


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
    if _is_number(value):
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
    if missing := [k for k in _STATS if not _is_number(st.get(k))]:
        raise UserError(f"{where}: benchmark {name} lacks stats {', '.join(missing)}")
    return Bench(key=str(raw.get("fullname") or name), name=name,
                 group=str(raw.get("group") or "ungrouped"), params=dict(raw.get("params") or {}),
                 extra=dict(raw.get("extra_info") or {}), min_s=float(st["min"]),
                 max_s=float(st["max"]), median_s=float(st["median"]), iqr_s=float(st["iqr"]),
                 rounds=int(st["rounds"]))


def load_run(path: str | os.PathLike) -> Run:
    """Read a saved pytest-benchmark run; every problem is one UserError line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"no such run file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}, column "
                        f"{exc.colno}); is it truncated?") from None
    if not isinstance(payload, Mapping) or not isinstance(payload.get("benchmarks"), list):
        raise UserError(f"{path} is not a pytest-benchmark run: no 'benchmarks' list")
    if not payload["benchmarks"]:
        raise UserError(f"{path} holds no benchmarks: the run measured nothing")
    return Run(path, tuple(_bench_from(b, str(path)) for b in payload["benchmarks"]), payload)


def compare(baseline: Run, candidate: Run, options: gate.GateOptions | None = None
            ) -> gate.GateResult:
    """The gate's verdicts on every benchmark both runs hold (UserError if they can't be)."""
    return gate.compare_runs(baselines.run_from_json(baseline.payload, str(baseline.path)),
                             baselines.run_from_json(candidate.payload, str(candidate.path)),
                             options)


# --- markdown ---------------------------------------------------------------------------------


def fmt_seconds(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e6:.3g} µs"


def _fmt(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _rates(bench: Bench, per_prompt_token: bool) -> tuple[float | None, float | None]:
    """(tokens/s, ms/token): of generated tokens, or of prompt tokens for prefill."""
    if not per_prompt_token:
        return bench.tokens_per_second, bench.ms_per_token
    count = bench.value("input_tokens")
    if not _is_number(count) or count <= 0:
        return None, None
    return count / bench.median_s, 1e3 * bench.median_s / count


def _verdict_cells(c) -> list[str]:
    if c is None:
        return ["–", "–", "not in the baseline"]
    high = "inf" if math.isinf(c.ci_high) else f"{c.ci_high:.3f}"
    verdict = c.verdict.value
    if verdict == "regression":
        verdict = "**regression**"
    elif c.rounds_needed is not None:
        verdict += f" (~{c.rounds_needed} rounds/side)"
    return [fmt_seconds(c.baseline_median), f"{c.ratio:.3f} [{c.ci_low:.3f}, {high}]", verdict]


def group_table(benches: list[Bench], result: gate.GateResult | None) -> list[str]:
    """One markdown table for one group's benchmarks."""
    per_prompt = benches[0].group in PROMPT_RATE_GROUPS
    extras = [(k, label) for k, label in (("ttft_ms", "TTFT (ms)"), ("itl_ms", "ITL (ms)"))
              if any(b.metric(k) is not None for b in benches)]
    head = ["benchmark", "rounds", "median", "IQR",
            *(["prompt tokens/s", "ms/prompt token"] if per_prompt else ["tokens/s", "ms/token"]),
            *(label for _, label in extras)]
    align = ["---"] + ["---:"] * (len(head) - 1)
    if result is not None:
        head += ["baseline median", "ratio [CI]", "verdict"]
        align += ["---:", "---:", "---"]
        by_key = {c.name: c for c in result.comparisons}
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    for b in benches:
        metrics = [b.metric(k) for k, _ in extras]
        name = b.name.replace("|", "\\|")
        row = [f"`{name}`", str(b.rounds), fmt_seconds(b.median_s),
               fmt_seconds(b.iqr_s), *(_fmt(v, d) for v, d in zip(_rates(b, per_prompt), (1, 2),
                                                                   strict=True)),
               *("–" if m is None else f"{m[0]:,.1f}" for m in metrics)]
        if result is not None:
            row += _verdict_cells(by_key.get(b.key))
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _env_value(value) -> str:
    if value is None or value == {} or value == []:
        return "–"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={_env_value(v)}" for k, v in value.items())
    if isinstance(value, list) and all(_is_number(v) for v in value):
        return f"{len(value)} rounds, median {fmt_seconds(sorted(value)[len(value) // 2])}"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _fingerprint(fp) -> str:
    """The model's identity in a line: architecture, size, dtype, and a hash of the rest."""
    if not isinstance(fp, Mapping):
        return _env_value(fp)
    parts = [str(fp[k]) for k in ("architecture", "dtype") if fp.get(k)]
    if _is_number(n := fp.get("num_parameters")):
        size = next((f"{n / s:.3g}{u}" for s, u in ((1e9, "B"), (1e6, "M"), (1e3, "k"))
                     if n >= s), f"{n:g}")
        parts.insert(min(1, len(parts)), f"{size} parameters")
    source = fp.get("source")
    if isinstance(source, Mapping):
        source = source.get("kind") or source.get("path") or source.get("repo")
    digest = hashlib.sha256(json.dumps(fp, sort_keys=True, default=str).encode()).hexdigest()
    return ", ".join(parts + ([f"from {source}"] if source else []) + [f"sha256 {digest[:12]}"])


def _environment_rows(run: Run) -> dict[str, str]:
    env, section = run.environment, run.section
    rows = {k: _env_value(env.get(k)) for k in ("model", "device", "device_name", "dtype",
                                                "threads")}
    rows["fingerprint"] = _fingerprint(env.get("fingerprint"))
    rows.update({f"version: {k}": str(v) for k, v in (env.get("versions") or {}).items()})
    rows["thread env"] = _env_value(env.get("thread_env"))
    for key, label in (("profile", "profile"), ("rounds", "rounds"),
                       ("warmup_rounds", "warm-up rounds"), ("shuffle_seed", "shuffle seed"),
                       ("load_s", "model load (s)"), ("warmup_s", "warm-up (s)"),
                       ("control_s", "control workload")):
        rows[label] = _env_value(section.get(key))
    commit = run.payload.get("commit_info") or {}
    rows["commit"] = (str(commit.get("id") or "–")[:12] + (" (dirty)" if commit.get("dirty")
                                                           else ""))
    rows["date"] = str(run.payload.get("datetime") or "–")
    return rows


def environment_table(run: Run, baseline: Run | None) -> list[str]:
    mine = _environment_rows(run)
    if baseline is None:
        return ["| field | run |", "|---|---|",
                *(f"| {k} | {v.replace('|', '/')} |" for k, v in mine.items())]
    theirs = _environment_rows(baseline)
    lines = ["| field | run | baseline |", "|---|---|---|"]
    for key in [*mine, *(k for k in theirs if k not in mine)]:
        a, b = mine.get(key, "–"), theirs.get(key, "–")
        mark = " **≠**" if a != b and key in baselines.MATCHED_FIELDS else ""
        lines.append(f"| {key}{mark} | {a.replace('|', '/')} | {b.replace('|', '/')} |")
    return lines


def render_markdown(run: Run, result: gate.GateResult | None, baseline: Run | None,
                    outcomes: tuple[plots.PlotOutcome, ...]) -> str:
    lines = [f"# llmbench report: {run.title}", ""]
    if result is None:
        env = _environment_rows(run)
        lines += [f"Run: `{run.path}` (commit {env['commit']}, {env['date']}). No baseline: "
                  "pass `--baseline B.json` for verdicts."]
    else:
        lines += [f"- {line}" for line in gate.header_lines(result)]
        lines += ["", f"**{gate.summary_line(result)}**", "", "Ratio = median(run) / "
                  "median(baseline), > 1 is slower; a regression needs a Holm-significant rank "
                  "test and the whole CI beyond the threshold (see `llmbench compare`)."]
    for group, benches in run.groups().items():
        lines += ["", f"## {group}", "", *group_table(benches, result)]
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


# --- writing ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportResult:
    markdown: Path
    plots: tuple[plots.PlotOutcome, ...]
    gate: gate.GateResult | None


def write_report(run_path: str | os.PathLike, out_dir: str | os.PathLike,
                 baseline_path: str | os.PathLike | None = None, *, force: bool = False,
                 options: gate.GateOptions | None = None) -> ReportResult:
    """Write report.md and the plots into out_dir; refuse an existing report unless force."""
    out = Path(out_dir)
    target = out / REPORT_NAME
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a folder: choose another -o")
    if target.exists() and not force:
        raise UserError(f"{out} already holds a report: pass --force to replace it, or "
                        "choose another -o folder")
    run = load_run(run_path)
    baseline = load_run(baseline_path) if baseline_path is not None else None
    result = compare(baseline, run, options) if baseline is not None else None
    try:
        out.mkdir(parents=True, exist_ok=True)
        if force:  # a plot this run cannot draw must not survive from the last report
            for name in plots.PLOT_FILES:
                (out / name).unlink(missing_ok=True)
        outcomes = plots.draw_all(run, baseline, out)
        _write_text(target, render_markdown(run, result, baseline, outcomes), replace=force)
    except FileExistsError:
        raise UserError(f"{out} already holds a report: pass --force to replace it") from None
    except OSError as exc:
        raise UserError(f"cannot write the report into {out}: {exc.strerror or exc}") from None
    return ReportResult(markdown=target, plots=outcomes, gate=result)


def _write_text(path: Path, text: str, *, replace: bool) -> None:
    """Write atomically; without `replace`, fail if the file appeared meanwhile."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails if the name exists: never clobbers
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
