"""Saved runs: the one model of a pytest-benchmark run, reading it, writing it atomically,
numbering, and the environment it was measured in (fingerprint and matching).

May import: `llmbench.errors` only.
"""
