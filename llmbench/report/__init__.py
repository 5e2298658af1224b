"""Reports: markdown tables and matplotlib figures for a saved run, with the gate's verdicts
against a baseline.

May import: `llmbench.gate`, `llmbench.runs`, `llmbench.errors`.
"""
