"""The inference engine: model registry and loaders, the conversion cache, device, dtype
and threads with `sync()` and the one device-synced stopwatch, prompts, our prefill/decode
loop with a dynamic or static KV cache and optionally compiled decode steps, the
`model.generate` path, and static batching.

May import: `llmbench.errors` only. Everything else in llmbench may import it.
"""
