"""The regression gate: `stats` (pure functions over arrays, immutable verdicts), `sequential`
(the paired design), `family` (slower candidates decided together), `noise` (the noise between
stored runs), `stored` (what two stored runs may conclude), `confirmation` (the paired A/B that
settles them, one typed record) and `confirm_plan` (what its budget can decide), the gate
options described once, `compare` (two loaded runs in, screened verdicts out; no file I/O),
`pipeline` (one stored verdict's way from the rounds to the exit code, step by step), `work`
(counted work, exactly) and `render` (text, markdown, JSON). The names below are the gate's
API. Running an A/B is not the gate's: `llmbench.ab` runs it and hands its runs here to be
judged.

May import: `llmbench.runs`, `llmbench.errors`, `llmbench.argtypes`; never torch, the engine or
the server (import-linter's contracts in pyproject.toml). `stats` imports nothing of ours.
"""

from llmbench.gate.compare import (
    DEFAULT_ALPHA,
    GateOptions,
    GateResult,
    Judged,
    NothingInCommon,
    SameRun,
    parse_fraction,
    parse_threshold_for,
    screen_runs,
)
from llmbench.gate.confirmation import Confirmation
from llmbench.gate.pipeline import Request, compare_runs, judge
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
    "DEFAULT_ALPHA", "FORMATS", "Confirmation", "GateOptions", "GateResult", "Judged",
    "NothingInCommon", "Request", "SameRun", "compare_runs", "header_lines", "judge",
    "parse_fraction", "parse_threshold_for", "render", "render_markdown", "render_text",
    "screen_runs", "summary_line", "to_json",
]
