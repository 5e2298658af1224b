"""Serving: the FastAPI app, its request/response schemas, the OpenAI-compatible routes,
SSE framing, and the continuous-batching scheduler. The client that measures it from the
outside is `llmbench.load`.

May import: `llmbench.engine`, `llmbench.errors`.
"""
