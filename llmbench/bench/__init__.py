"""The benchmark suite's pytest side: options and settings, sweep profiles, the session
record and the gate hook, the machine-speed control workload, and the slowdown injector.

May import: everything but `llmbench.cli`.
"""
