"""The report's "Work per case" table: each case's counted work (aten ops, FLOPs, bytes of one
round), and against a baseline what changed, op by op."""

from __future__ import annotations

from llmbench import gate
from llmbench.gate.render import markdown_table
from llmbench.gate.work import WorkStatus, counts_of
from llmbench.runs import Run


def _si(value: float, unit: str) -> str:
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.0f} {unit}".rstrip()


def work_table(run: Run, result: gate.GateResult | None) -> list[str]:
    """Markdown lines; [] when no case of the run counted its work."""
    counted = {k: counts_of(b.extra_info) for k, b in run.benchmarks.items()}
    if all(isinstance(c, str) for c in counted.values()):
        return []
    findings = {f.name: f for f in result.work} if result is not None else {}
    head = ["benchmark", "aten ops", "FLOPs", "bytes"] + (["vs baseline"] if result else [])
    rows = []
    for key, bench in run.benchmarks.items():
        counts = counted[key]
        if isinstance(counts, str):
            cells = [f"not counted: {counts}", "", ""]
        else:
            read, written = int(counts.get("bytes_read", 0)), int(counts.get("bytes_written", 0))
            cells = [f"{int(counts.get('num_ops', 0)):,}", _si(int(counts.get("flops", 0)), ""),
                     _si(read + written, "B")]
        row = [f"`{bench.name}`", *cells]
        if result is not None:
            finding = findings.get(key)
            if key in result.other_work:
                row.append(f"did other work: {result.other_work[key]}")
            elif finding is None:
                row.append("not in the baseline")
            elif finding.status in (WorkStatus.UNCHANGED, WorkStatus.NOT_COUNTED):
                row.append(finding.status.value)
            else:
                row.append(f"**{finding.status.value}**: {finding.describe()}")
        rows.append(row)
    return markdown_table(head, rows, "<>>>" + ("<" if result else ""))
