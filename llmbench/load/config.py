"""What a load run is asked to do (`LoadConfig`), the protocols it speaks, and the names of the
ways a request can get no answer: shared by the client and its results."""

from __future__ import annotations

from dataclasses import dataclass

from llmbench.errors import UserError
from llmbench.load.schedule import Arrivals

APIS = ("native", "openai")
# Why a request got no answer at all (beside an HTTP status); `result` names the rest.
ERROR_EVENT, TIMEOUT, CONNECTION_ERROR, BAD_STREAM = (
    "error event", "timeout", "connection error", "bad stream")
# A later turn of a conversation whose earlier turn got no answer: never sent, since there
# was no conversation to resend.
SESSION_ENDED = "session ended"


# Where `llmbench serve` listens by default. The client keeps its own copy rather than
# importing the app's settings: a load run against another server must not load FastAPI
# and torch. tests/test_client.py checks that the two agree.
DEFAULT_URL = "http://127.0.0.1:8000"


@dataclass(frozen=True)
class LoadConfig:
    """Where to send load, how much, and how long to keep at it: `concurrency` requests
    at a time (closed loop), or on the schedule `arrivals` draws (open loop), the first
    `warmup` and the last `cooldown` requests sent but left out of the figures."""

    url: str = DEFAULT_URL
    api: str = "native"
    concurrency: int = 1
    num_requests: int = 32
    chat: bool = True  # native: chat template; openai: /v1/chat/completions
    model: str | None = None  # sent as the OpenAI `model` field
    timeout_s: float = 120.0  # per request
    duration_s: float | None = None  # whole run; requests still running then are cut off
    arrivals: Arrivals | None = None  # open loop; `concurrency` is then not used
    warmup: int = 0
    cooldown: int = 0
    max_lag_s: float = 0.010  # open loop: a lag beyond it means the client fell behind
    # Open loop: the percentile of the measured requests' lags judged against `max_lag_s`.
    # A client descheduled once sends a few requests late and then catches up, offering the
    # level its rate; one that cannot keep up sends most of them late.
    lag_percentile: float = 99.0
    workers: int = 1  # open loop: client processes the schedule is spread over
    # Open loop: send from a spawned process even with one worker, for a caller whose own
    # threads are busy while the load runs (a server in the same process): the sender's
    # event loop then shares neither a thread nor the interpreter lock with them.
    own_process: bool = False
    ray_address: str | None = None  # open loop: the workers are a Ray cluster's actors
    think_s: float = 0.0  # multi-turn: from an answer's end to the session's next turn

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise UserError(f"--url must start with http:// or https://, got {self.url!r}")
        if self.api not in APIS:
            raise UserError(f"unknown api {self.api!r}: choose one of {', '.join(APIS)}")
        if self.concurrency < 1 or self.num_requests < 1:
            raise UserError("concurrency and number of requests must be at least 1, got "
                            f"{self.concurrency} and {self.num_requests}")
        if self.warmup < 0 or self.cooldown < 0 or (
                self.warmup + self.cooldown >= self.num_requests):
            raise UserError(f"--warmup {self.warmup} and --cooldown {self.cooldown} leave no "
                            f"request of {self.num_requests} to measure: send more with "
                            "--requests, or leave fewer out")
        if self.workers < 1 or (self.workers > 1 and self.arrivals is None):
            raise UserError("--workers spreads an open-loop schedule over processes: add "
                            "--rate, or drop --workers")
        if self.own_process and self.arrivals is None:
            raise UserError("a load sent from its own process is an open-loop schedule: "
                            "give it arrivals")
        if self.ray_address is not None and self.arrivals is None:
            raise UserError("--ray spreads an open-loop schedule over a cluster's machines: "
                            "add --rate, or drop --ray")
        if not 0 <= self.think_s < float("inf"):
            raise UserError("--think-time must be zero or positive milliseconds")
        if not self.max_lag_s > 0:
            raise UserError("--max-lag must be positive milliseconds")
        if not 0 < self.lag_percentile <= 100:
            raise UserError(f"--lag-percentile must be above 0 and at most 100, got "
                            f"{self.lag_percentile:g}")
        if not self.timeout_s > 0 or (self.duration_s is not None and not self.duration_s > 0):
            raise UserError("--timeout and --duration must be positive seconds")
