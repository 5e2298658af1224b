"""Counted work compared exactly: the verdict beside time that no noise can blur.

Each benchmark case of a run may carry `extra_info["work"]`: the ops, FLOPs and bytes of one
untimed round (see `llmbench.engine.counting`), or `{"not_counted": reason}` for a case whose
work happens elsewhere (a server on its own thread or machine). Two runs' counts are compared
exactly, so any difference at all is a finding; whether it fails the gate follows one rule:

- **more work** (a regression): FLOPs, bytes or dispatched ops grew by more than the work
  threshold (default 1% each), or more graphs were compiled or more graph breaks hit;
- **less work** (an improvement): one of them shrank by more than the threshold and none grew;
- **work changed**: the counts differ within the threshold (an op traded for another);
- **work unchanged**: identical counts, op by op.

Counts depend on the torch and transformers versions (they decide what is dispatched), so
when those differ the findings are still shown but never fail the gate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

DEFAULT_WORK_THRESHOLD = 0.01
# Versions that decide which aten ops a model dispatches.
WORK_VERSIONS = ("torch", "transformers")

# (key in the saved counts, name shown)
SIZES = (("num_ops", "ops"), ("flops", "FLOPs"), ("bytes", "bytes"))
COMPILES = (("graphs_compiled", "graphs compiled"), ("graph_breaks", "graph breaks"))


class WorkStatus(Enum):
    UNCHANGED = "work unchanged"
    CHANGED = "work changed"
    MORE = "more work"
    LESS = "less work"
    NOT_COUNTED = "not counted"


@dataclass(frozen=True)
class WorkFinding:
    """One benchmark's counts on both sides, and what they say."""

    name: str
    status: WorkStatus
    sizes: tuple[tuple[str, int, int], ...] = ()  # (shown name, baseline, candidate)
    op_changes: tuple[tuple[str, int], ...] = ()  # (aten op, candidate - baseline), biggest first
    reason: str = ""  # why it was not counted

    @property
    def is_regression(self) -> bool:
        return self.status is WorkStatus.MORE

    def describe(self, limit: int = 3) -> str:
        """'+30 aten::mm, +12.0% FLOPs, +8.1% bytes'; the reason when not counted."""
        if self.status is WorkStatus.NOT_COUNTED:
            return self.reason
        parts = [f"{delta:+d} {op}" for op, delta in self.op_changes[:limit]]
        if len(self.op_changes) > limit:
            parts.append(f"{len(self.op_changes) - limit} more ops changed")
        # The op count's change is already spelled out op by op above.
        parts += [_relative(base, cand, shown) for shown, base, cand in self.sizes
                  if base != cand and shown != "ops"]
        return ", ".join(parts) if parts else "identical counts"

    def to_json(self) -> dict:
        return {"name": self.name, "status": self.status.value, "reason": self.reason or None,
                "sizes": {shown: {"baseline": b, "candidate": c} for shown, b, c in self.sizes},
                "op_changes": dict(self.op_changes), "summary": self.describe(limit=5)}


def _relative(base: int, cand: int, shown: str) -> str:
    """'+12.0% FLOPs'; a change too small for a percentage in units: '+160 bytes'."""
    if base == 0 or abs(cand - base) / base < 0.0005:
        return f"{cand - base:+,d} {shown}"
    return f"{100.0 * (cand - base) / base:+.1f}% {shown}"


def rule_words(threshold: float) -> str:
    """What fails, in words: 'more than 1% more FLOPs, bytes or ops', or any growth at 0."""
    if threshold == 0:
        return "any growth of FLOPs, bytes or ops"
    return f"more than {threshold:.0%} more FLOPs, bytes or ops"


def counts_of(extra_info: Mapping) -> Mapping | str:
    """A case's saved counts, or why there are none."""
    work = extra_info.get("work")
    if not isinstance(work, Mapping):
        return "the run has no counted work (saved before llmbench counted it)"
    if work.get("not_counted"):
        return str(work["not_counted"])
    return work


def size_of(counts: Mapping, key: str) -> int:
    """One size of a case's counts: "bytes" is what it read and wrote together."""
    if key == "bytes":
        return int(counts.get("bytes_read", 0)) + int(counts.get("bytes_written", 0))
    return int(counts.get(key) or 0)


def judge_work(name: str, baseline: Mapping, candidate: Mapping,
               threshold: float = DEFAULT_WORK_THRESHOLD) -> WorkFinding:
    """Compare one case's counts (`counts_of` each side's extra_info)."""
    base, cand = counts_of(baseline), counts_of(candidate)
    if isinstance(base, str) or isinstance(cand, str):
        which = "baseline" if isinstance(base, str) else "candidate"
        return WorkFinding(name, WorkStatus.NOT_COUNTED,
                           reason=f"{which}: {base if isinstance(base, str) else cand}")
    sizes = tuple((shown, size_of(base, key), size_of(cand, key)) for key, shown in SIZES)
    # None (dynamo never ran in that process) compiled nothing, as 0 says.
    compiles = tuple((shown, int(base.get(key) or 0), int(cand.get(key) or 0))
                     for key, shown in COMPILES
                     if base.get(key) is not None or cand.get(key) is not None)
    ops_b, ops_c = dict(base.get("ops") or {}), dict(cand.get("ops") or {})
    op_changes = sorted(((op, ops_c.get(op, 0) - ops_b.get(op, 0)) for op in {*ops_b, *ops_c}
                         if ops_c.get(op, 0) != ops_b.get(op, 0)),
                        key=lambda item: (-abs(item[1]), item[0]))

    def grew(b: int, c: int) -> bool:
        return c > b and (b == 0 or (c - b) / b > threshold)

    def shrank(b: int, c: int) -> bool:
        return c < b and (b - c) / b > threshold

    more_compiled = any(c > b for _, b, c in compiles)
    if any(grew(b, c) for _, b, c in sizes) or more_compiled:
        status = WorkStatus.MORE
    elif any(shrank(b, c) for _, b, c in sizes):
        status = WorkStatus.LESS
    elif op_changes or any(b != c for _, b, c in (*sizes, *compiles)):
        status = WorkStatus.CHANGED
    else:
        status = WorkStatus.UNCHANGED
    return WorkFinding(name, status, sizes=sizes + compiles, op_changes=tuple(op_changes))


def judge_all(names: Sequence[str], baseline: Mapping[str, Mapping],
              candidate: Mapping[str, Mapping], threshold: float = DEFAULT_WORK_THRESHOLD
              ) -> tuple[WorkFinding, ...]:
    """`judge_work` for each name, from each side's extra_info by name."""
    return tuple(judge_work(n, baseline[n], candidate[n], threshold) for n in names)


def tally(findings: Sequence[WorkFinding]) -> str:
    """'27 work unchanged, 4 not counted': each status found, in order of first appearance."""
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.status.value] = counts.get(f.status.value, 0) + 1
    return ", ".join(f"{n} {status}" for status, n in counts.items())


def differing(findings: Sequence[WorkFinding]) -> list[WorkFinding]:
    """The findings worth a line of their own: counted, and not identical."""
    return [f for f in findings if f.status not in (WorkStatus.UNCHANGED,
                                                    WorkStatus.NOT_COUNTED)]


def versions_differ(versions: Mapping[str, tuple]) -> list[str]:
    """The version differences (from `version_differences`) that change what is counted."""
    return [f"{k} {a} -> {b}" for k, (a, b) in versions.items() if k in WORK_VERSIONS]
