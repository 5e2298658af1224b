"""pytest wiring for the llmbench benchmark suite: the plugin (options, session record and
regression gate, in `llmbench.bench.plugin`, whose docstring says why it is registered here
and not by an entry point) and the suite's fixtures."""

pytest_plugins = [
    "llmbench.bench.plugin",
    "fixtures.model", "fixtures.timing", "fixtures.server",
]
