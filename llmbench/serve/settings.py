"""The server's settings, apart from the app, so that `llmbench serve --help` and any
other front end can read their defaults without loading FastAPI or torch."""

from __future__ import annotations

from dataclasses import dataclass

from llmbench.errors import UserError

# Positions per sequence in a static cache's slots: attention spans all of them at every
# step, so the default stays near the longest requests a small model's server expects.
DEFAULT_MAX_CONTEXT = 512


@dataclass(frozen=True)
class ServerSettings:
    """How the server listens and what it accepts."""

    host: str = "127.0.0.1"
    port: int = 8000
    max_new_tokens_cap: int = 256
    max_batch_size: int = 16  # sequences decoded together
    max_waiting: int = 256  # queued requests beyond which the server answers 503
    max_body_bytes: int = 1 << 20
    # The longest request (prompt + max_new_tokens) a static cache's slot holds.
    max_context: int = DEFAULT_MAX_CONTEXT

    def __post_init__(self) -> None:
        if not self.host:
            raise UserError("--host must not be empty (use 127.0.0.1 for loopback)")
        if not 0 <= self.port <= 65535:
            raise UserError(f"--port must be in 0..65535 (0 picks a free port), got {self.port}")
        for name in ("max_new_tokens_cap", "max_batch_size", "max_waiting", "max_body_bytes",
                     "max_context"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be at least 1, got {getattr(self, name)}")
