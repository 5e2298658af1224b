"""The regression gate: `stats` (pure functions over arrays, immutable verdicts), the gate
options described once, `compare` (two loaded runs in, verdicts out; no file I/O), `render`
(text, markdown, JSON), and `ab` (A/B runs of two revisions, which loads its runs through
`llmbench.runs`). The names below are the gate's API; `ab` is imported on its own, as it
starts subprocesses.

May import: `llmbench.runs`, `llmbench.errors`. `stats` imports nothing of ours.
"""

from llmbench.gate.compare import (
    DEFAULT_ALPHA,
    GateOptions,
    GateResult,
    NothingInCommon,
    SameRun,
    compare_runs,
    parse_fraction,
    parse_threshold_for,
)
from llmbench.gate.render import (
    FORMATS,
    header_lines,
    render,
    render_markdown,
    render_text,
    summary_line,
    to_json,
)

__all__ = [
    "DEFAULT_ALPHA", "FORMATS", "GateOptions", "GateResult", "NothingInCommon", "SameRun",
    "compare_runs", "header_lines", "parse_fraction", "parse_threshold_for", "render",
    "render_markdown", "render_text", "summary_line", "to_json",
]
