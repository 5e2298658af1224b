"""The regression gate: `stats` (pure functions over arrays, immutable verdicts), the gate
options described once, `compare` (two runs in, verdicts out), and A/B runs of two revisions.

May import: `llmbench.runs`, `llmbench.errors`. `stats` imports nothing of ours.
"""
