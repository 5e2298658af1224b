"""One open-loop schedule spread over several client processes (`--workers N`), for rates
one process cannot keep: its event loop is a single thread, and past some rate it handles
other streams' events when a request falls due, so requests go out late.

Worker w of n sends the requests i with i mod n == w, at the offsets of the one schedule,
from one moment they all share. The coordinator starts the workers, waits until every one
has imported what it needs (a spawned process takes a second or more), then names that
moment a little ahead (`time.monotonic()`, one clock for every process on a machine), and
collects what each sent; the streams are counted and judged in the coordinator, so the
workers need no tokenizer. Processes are spawned, not forked: a fork would copy the
coordinator's threads and locks (an HTTP client, a tokenizer's pool) half-held.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import time
from collections.abc import Callable, Sequence

from llmbench.errors import UserError

START_AHEAD_S = 0.2  # from naming the shared moment to every worker's first request
READY_TIMEOUT_S = 120.0


def _worker(send, config, params, prompts, share, ready, go, origin, results) -> None:
    """One worker process: ready, wait for the moment, send its share, report."""
    try:
        ready.wait(READY_TIMEOUT_S)
        go.wait(READY_TIMEOUT_S)
        results.put((share[0], asyncio.run(send(config, params, prompts, None, share,
                                                origin.value))))
    except BaseException as exc:  # reported, so the coordinator never waits for nothing
        results.put((share[0], f"{type(exc).__name__}: {exc}"))


def send_spread(send: Callable, config, params, prompts: Sequence,
                progress: Callable[[], None] | None) -> list:
    """Run `send` (the client's async sender, a module-level function so that a spawned
    process can import it) in `config.workers` processes over one schedule; returns what
    each sent, in worker order."""
    workers = config.workers
    context = multiprocessing.get_context("spawn")
    ready, go = context.Barrier(workers + 1), context.Event()
    origin, results = context.Value("d", 0.0), context.Queue()
    processes = [context.Process(target=_worker, daemon=True,
                                 args=(send, config, params, list(prompts), (w, workers),
                                       ready, go, origin, results))
                 for w in range(workers)]
    for process in processes:
        process.start()
    try:
        ready.wait(READY_TIMEOUT_S)
        origin.value = time.monotonic() + START_AHEAD_S
        go.set()
        parts: dict[int, object] = {}
        while len(parts) < workers:
            try:
                worker, part = results.get(timeout=1.0)
            except queue.Empty:
                if not all(p.is_alive() for p in processes) and results.empty():
                    raise UserError("a load worker process ended without a result") from None
                continue
            if isinstance(part, str):
                raise UserError(f"load worker {worker} failed: {part}")
            parts[worker] = part
            if progress is not None:
                for _ in part.outcomes:
                    progress()
        return [parts[w] for w in range(workers)]
    finally:
        for process in processes:
            process.join(5)
            if process.is_alive():
                process.terminate()
