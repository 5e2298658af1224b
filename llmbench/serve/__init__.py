"""Serving: the FastAPI app, its request/response schemas, the OpenAI-compatible routes,
SSE framing, and the continuous-batching scheduler; plus the HTTP client and load generator,
which import no server code (so a load run against another server needs neither FastAPI nor
torch).

May import: `llmbench.engine`, `llmbench.errors`.
"""
