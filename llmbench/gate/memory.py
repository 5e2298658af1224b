"""Peak memory compared: a figure that can regress, with a threshold of its own.

Each case records the peak memory of one untimed round of its own above what was in use
when it began (`extra_info["peak_memory_added_bytes"]`: on Linux CPUs the resident
high-water mark, reset after freed memory was handed back, less the resident set at the
reset; on CUDA the peak allocated less the allocated). That is what the case itself needs,
whatever earlier cases left behind. Unlike time it hardly moves with the machine's load, so
one stored pair can judge it: a case whose figure grew by more than the memory threshold
(default 10%) and by more than `FLOOR_BYTES` (allocator noise) is "more memory", and fails
the gate. Figures that are not a case's own (`process_peak_memory_bytes`, a
never-reset mark that depends on which case ran before; MPS's `allocated_memory_bytes`),
and runs saved before the figure was recorded (run format 1), are shown as not comparable,
never judged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

DEFAULT_MEMORY_THRESHOLD = 0.10
# Allocator noise alone moves a case's added peak between processes of one commit (figures:
# docs/measurements/2026-12-02-stored-verdicts.md, runs F and G, from before the window
# opened after freed memory is handed back; docs/measurements/2026-12-06-memory-window.md
# after), so a move must also exceed this.
FLOOR_BYTES = 128 << 20
# The name `llmbench.engine.device` records the figure under (the gate imports no engine).
PER_CASE = "peak_memory_added_bytes"
FIRST_PER_CASE_FORMAT = 2  # runs of format 1 recorded only the process's peak


class MemoryStatus(Enum):
    SAME = "memory within threshold"
    MORE = "more memory"
    LESS = "less memory"
    NOT_COMPARABLE = "memory not compared"


@dataclass(frozen=True)
class MemoryFinding:
    name: str
    status: MemoryStatus
    baseline_bytes: int | None = None
    candidate_bytes: int | None = None

    @property
    def is_regression(self) -> bool:
        return self.status is MemoryStatus.MORE

    def describe(self) -> str:
        if self.baseline_bytes is None or self.candidate_bytes is None:
            return "no per-case figure in both runs"
        change = (f" ({self.candidate_bytes / self.baseline_bytes - 1:+.1%})"
                  if self.baseline_bytes else "")
        return (f"{self.baseline_bytes / 2**20:.0f} MiB -> {self.candidate_bytes / 2**20:.0f} "
                f"MiB above the case's start{change}")


def judge_memory(name: str, baseline: Mapping, candidate: Mapping, threshold: float
                 ) -> MemoryFinding:
    """One case's per-case peaks (`extra_info`s of both runs) against the threshold."""
    b, c = baseline.get(PER_CASE), candidate.get(PER_CASE)
    if not (isinstance(b, int) and isinstance(c, int) and b >= 0 and c >= 0):
        return MemoryFinding(name, MemoryStatus.NOT_COMPARABLE)
    if c > b * (1 + threshold) and c - b > FLOOR_BYTES:  # b may be 0: then the floor decides
        status = MemoryStatus.MORE
    elif b > c * (1 + threshold) and b - c > FLOOR_BYTES:
        status = MemoryStatus.LESS
    else:
        status = MemoryStatus.SAME
    return MemoryFinding(name, status, b, c)


def judge_all(names: Sequence[str], baseline: Mapping[str, Mapping],
              candidate: Mapping[str, Mapping], threshold: float, formats: tuple[int, int]
              ) -> tuple[MemoryFinding, ...]:
    """`judge_memory` for each name; nothing is compared when a run predates per-case peaks
    (`formats`: each run's format version)."""
    if min(formats) < FIRST_PER_CASE_FORMAT:
        return tuple(MemoryFinding(n, MemoryStatus.NOT_COMPARABLE) for n in names)
    return tuple(judge_memory(n, baseline[n], candidate[n], threshold) for n in names)
