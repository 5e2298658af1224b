"""One open-loop schedule spread over the machines of a Ray cluster (`--workers N --ray
ADDRESS`), for rates one machine's client processes cannot keep.

The split is `workers`' (worker w of n sends the sessions s with s mod n == w, at the
offsets of the one schedule); here each worker is a Ray actor, placed with Ray's SPREAD
strategy so the workers land on as many machines as the cluster has. The coordinator waits
until every actor is up, then names the shared moment in wall-clock time a little ahead
(`time.time()`: machines share no monotonic clock), and each actor turns it into its own
monotonic clock. The schedule on different machines is therefore aligned as well as their
clocks are synchronised (NTP keeps it to milliseconds); each worker's lag behind its own
schedule is measured as on one machine. The streams are counted and judged in the
coordinator, so the actors need no tokenizer, but every machine needs llmbench installed.

Ray is an optional dependency (`pip install 'llmbench[cluster]'`), imported only here and
only when `--ray` is given: the cluster is Ray's, never one of our own.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable, Sequence

from llmbench.errors import UserError

# From naming the moment to every worker's first request: room for the call to reach an
# actor on another machine.
START_AHEAD_S = 1.0
READY_TIMEOUT_S = 120.0
REACH_TIMEOUT_S = 5.0
INSTALL_HINT = "pip install 'llmbench[cluster]'"


class LoadActor:
    """One load worker on a machine of the cluster (made a Ray actor by `spread_over_ray`)."""

    def where(self, send: Callable) -> str:
        """The machine this worker runs on. Asked before the start is named, with the
        sender: unpickling it imports the client's module (httpx, numpy, scipy) here and
        now, not inside the head start."""
        del send
        return socket.gethostname()

    def send(self, send: Callable, config, params, prompts: Sequence,
             share: tuple[int, int], origin_wall: float):
        # The shared moment in this machine's monotonic clock, which the sender times by.
        origin = time.monotonic() + (origin_wall - time.time())
        return asyncio.run(send(config, params, prompts, None, share, origin))


def _last_line(exc: BaseException) -> str:
    """A Ray error's last line: the remote exception, without Ray's traceback."""
    text = str(exc).strip()
    return text.splitlines()[-1] if text else type(exc).__name__


def _ray():
    try:
        import ray
    except ImportError:
        raise UserError(f"--ray needs Ray on this machine and on the cluster's: {INSTALL_HINT}"
                        ) from None
    return ray


def _check_reachable(address: str) -> None:
    """An address that names a host and port must answer on it: Ray's own connect retries
    for minutes before it gives up."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if address == "auto" or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_TIMEOUT_S).close()
    except OSError as exc:
        raise UserError(f"cannot join the Ray cluster at {address!r}: nothing answers there "
                        f"({exc.strerror or exc}); start one with `ray start --head`, or pass "
                        "its address") from None


def join(address: str):
    """Connect this process to the Ray cluster at `address` (as `ray.init` takes it: `auto`,
    HOST:PORT or ray://HOST:PORT) once; one line when it cannot."""
    ray = _ray()
    if ray.is_initialized():
        return ray
    _check_reachable(address)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # a load run reports nothing
    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR",
                 configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot join the Ray cluster at {address!r}: {first}; start one "
                        "with `ray start --head` (on every machine: `ray start --address "
                        "HEAD:6379`), or pass its address") from None
    return ray


def spread_over_ray(send: Callable, config, params, prompts: Sequence,
                    progress: Callable[[], None] | None) -> list:
    """Run `send` (the client's module-level async sender) in `config.workers` Ray actors
    over one schedule; returns what each sent, in worker order. A worker that fails is one
    line, never a hang."""
    ray = join(config.ray_address)
    workers = config.workers
    remote = ray.remote(num_cpus=1)(LoadActor)
    actors = [remote.options(scheduling_strategy="SPREAD").remote() for _ in range(workers)]
    try:
        try:
            ray.get([a.where.remote(send) for a in actors], timeout=READY_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            raise UserError(f"the cluster did not start {workers} load worker(s) within "
                            f"{READY_TIMEOUT_S:.0f} s: does it have {workers} free CPUs?"
                            ) from None
        except ray.exceptions.RayError as exc:  # llmbench missing on a machine, one lost
            raise UserError(f"a load worker could not start on the cluster: {_last_line(exc)}"
                            ) from None
        origin_wall = time.time() + START_AHEAD_S
        pending = {a.send.remote(send, config, params, list(prompts), (w, workers),
                                 origin_wall): w
                   for w, a in enumerate(actors)}
        parts: dict[int, object] = {}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            worker = pending.pop(done[0])
            try:
                parts[worker] = part = ray.get(done[0])
            except ray.exceptions.RayError as exc:
                raise UserError(f"load worker {worker} failed on the cluster: "
                                f"{_last_line(exc)}") from None
            if progress is not None:
                for _ in part.outcomes:
                    progress()
        return [parts[w] for w in range(workers)]
    finally:
        for actor in actors:
            ray.kill(actor)

