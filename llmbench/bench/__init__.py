"""The benchmark suite's pytest side: the plugin (`plugin`, registering `options`,
`record` and `gate_hook`), the settings it validates, sweep profiles, the machine-speed
control workload, and the slowdown injector (`inject`, a plugin loaded with `-p`).

May import: everything but `llmbench.cli`.
"""
