"""The HTTP client and load generator: measures any server from the outside (`llmbench load`,
the suite's server benchmarks, `--server-url`). `config` (what a load run is asked), `client`
(streaming clients for the native and OpenAI protocols, and `run_load`), `result` (what was
served, counted and timed). It imports no server code, so a load run against another server
needs neither FastAPI nor torch.

May import: `llmbench.engine.config` (sampling settings), `llmbench.errors`.
"""
