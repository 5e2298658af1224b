"""A/B runs of two revisions on one machine at one time: process orchestration, kept out of the
gate. `checkout` (REV's git worktree, each side's environment and import check), `pairing`
(two long-lived suites taking turns round by round, judged sequentially within a budget),
`pair_worker` (the pytest plugin each paired side runs under; standalone, copied out under
its own module name) and `run`
(`run_ab`, which the CLI and the suite's confirmation call). The gate judges what they
measured: `llmbench.gate.compare_paired`.

May import: `llmbench.gate`, `llmbench.runs`, `llmbench.engine` (a side's allocator settings
and the device's default threshold), `llmbench.history` (a bisection's words),
`llmbench.errors`.
"""

from llmbench.ab.checkout import (
    ABError,
    Checkout,
    check_imports,
    check_pytest_args,
    child_env,
    end_on_sigterm,
    repo_root,
    resolve_rev,
    side_env,
    worktree,
)
from llmbench.ab.run import DEFAULT_BUDGET_S, judge_in_turn, live_threshold, run_ab

__all__ = [
    "DEFAULT_BUDGET_S", "ABError", "Checkout", "check_imports", "check_pytest_args",
    "child_env", "end_on_sigterm", "judge_in_turn", "live_threshold", "repo_root",
    "resolve_rev", "run_ab",
    "side_env", "worktree",
]
