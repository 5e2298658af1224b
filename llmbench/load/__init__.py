"""The HTTP client and load generator: measures any server from the outside (`llmbench load`,
the suite's server benchmarks, `--server-url`). `config` (what a load run is asked),
`schedule` (seeded open-loop arrivals), `client` (streaming clients for the native and
OpenAI protocols, and `run_load`, closed or open loop), `result` (what was served, counted
and timed), `objectives` (latency objectives judged with confidence), `queueing` (whether
the server kept up with a rate), `capacity` (the highest rate within the objectives),
`plot` (latency against throughput, a level's timeline), `workers` (one schedule over
client processes) and `cluster` (over a Ray cluster's machines). It imports no server
code, so a load run against another server needs neither FastAPI nor torch.

May import: `llmbench.engine.config` (sampling settings), `llmbench.errors`.
"""
