"""The regression gate: `stats` (pure functions over arrays, immutable verdicts), `sequential`
(the paired design), `family` (slower candidates decided together), `noise` (the noise between
stored runs) and `stored` (what two stored runs may conclude), the gate options described once,
`compare` (two loaded runs in, verdicts out; no file I/O), `work` (counted work, exactly) and
`render` (text, markdown, JSON). The names below are the gate's API. Running an A/B is not the
gate's: `llmbench.ab` runs it and hands its runs here to be judged.

May import: `llmbench.runs`, `llmbench.errors`, `llmbench.argtypes`; never torch, the engine or
the server (import-linter's contracts in pyproject.toml). `stats` imports nothing of ours.
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
