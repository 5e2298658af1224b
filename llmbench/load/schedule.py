"""When an open-loop load run sends each request: a seeded schedule of arrival offsets.

Open loop means the client sends on the schedule whatever the server does, as traffic from
many independent users arrives: a server that falls behind builds a queue, and its latency
grows, instead of the client politely waiting (closed loop, `--concurrency`), which hides
a slow server behind a lower request rate.

Arrivals, as vLLM's `bench serve` draws them: the gaps between requests are
  - poisson: exponential with mean 1 / rate (independent users; the default);
  - gamma: gamma with shape `burstiness` and the same mean (below 1 burstier than Poisson,
    above 1 more regular; 1 is Poisson);
  - constant: exactly 1 / rate.
The first request is sent at offset 0, and the drawn gaps are scaled so that the level
offers exactly `rate` over its span. The same (rate, arrival, burstiness, seed, number
of requests) always gives the same offsets, so two runs send the same requests at the same
moments and their per-request records line up.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmbench.errors import UserError

ARRIVALS = ("poisson", "gamma", "constant")


@dataclass(frozen=True)
class Arrivals:
    """How requests arrive: `rate` requests per second on average, drawn as `arrival` says."""

    rate: float
    arrival: str = "poisson"
    burstiness: float = 1.0  # gamma's shape; only for arrival="gamma"
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise UserError(f"--rate must be a positive number of requests per second, "
                            f"got {self.rate}")
        if self.arrival not in ARRIVALS:
            raise UserError(f"unknown arrival {self.arrival!r}: choose one of "
                            f"{', '.join(ARRIVALS)}")
        if not self.burstiness > 0:
            raise UserError(f"--burstiness must be positive, got {self.burstiness}")
        if self.burstiness != 1.0 and self.arrival != "gamma":
            raise UserError("--burstiness shapes gamma arrivals: add --arrival gamma, or drop "
                            "--burstiness")

    def offsets(self, num_requests: int) -> np.ndarray:
        """Seconds from the start of the level at which each of `num_requests` is sent."""
        mean_gap = 1.0 / self.rate
        if self.arrival == "constant":
            gaps = np.full(num_requests, mean_gap)
        else:
            rng = np.random.default_rng(self.seed)
            shape = self.burstiness if self.arrival == "gamma" else 1.0
            gaps = rng.gamma(shape, mean_gap / shape, size=num_requests)
        gaps[0] = 0.0  # the first request starts the level
        if num_requests > 1:
            # Scaled so the level offers exactly `rate`: a finite draw's own rate strays
            # (48 Poisson gaps by about 15%), and a level labelled with one rate that
            # offered another would misplace a capacity. The gaps keep their shape.
            gaps *= (num_requests - 1) * mean_gap / gaps.sum()
        return np.cumsum(gaps)

    def describe(self) -> str:
        shape = f", burstiness {self.burstiness:g}" if self.arrival == "gamma" else ""
        return f"rate {self.rate:g} req/s ({self.arrival}{shape})"
