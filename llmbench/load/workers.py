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
POLL_S = 0.05


def _worker(send, config, params, prompts, share, ready, go, origin, results) -> None:
    """One worker process: say it is ready, wait for the moment, send its share, report.
    A coordinator that never names the moment (it failed, or was killed) ends it."""
    try:
        with ready.get_lock():
            ready.value += 1
        if not go.wait(READY_TIMEOUT_S):
            return
        results.put((share[0], asyncio.run(send(config, params, prompts, None, share,
                                                origin.value))))
    except BaseException as exc:  # reported, so the coordinator never waits for nothing
        results.put((share[0], f"{type(exc).__name__}: {exc}"))


def _died(processes: list, waiting_for: set[int]) -> list[int]:
    return [w for w in waiting_for if not processes[w].is_alive()]


def send_spread(send: Callable, config, params, prompts: Sequence,
                progress: Callable[[], None] | None) -> list:
    """Run `send` (the client's async sender, a module-level function so that a spawned
    process can import it) in `config.workers` processes over one schedule; returns what
    each sent, in worker order. A worker that dies is one line, never a hang."""
    workers = config.workers
    context = multiprocessing.get_context("spawn")
    ready, go = context.Value("i", 0), context.Event()
    origin, results = context.Value("d", 0.0), context.Queue()
    processes = [context.Process(target=_worker, daemon=True,
                                 args=(send, config, params, list(prompts), (w, workers),
                                       ready, go, origin, results))
                 for w in range(workers)]
    for process in processes:
        process.start()
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while ready.value < workers:
            if dead := _died(processes, set(range(workers))):
                raise UserError(f"load worker {dead[0]} ended before it was ready (exit "
                                f"code {processes[dead[0]].exitcode})")
            if time.monotonic() > deadline:
                raise UserError(f"the load workers were not ready within "
                                f"{READY_TIMEOUT_S:.0f} s")
            time.sleep(POLL_S)
        origin.value = time.monotonic() + START_AHEAD_S
        go.set()
        parts: dict[int, object] = {}
        while len(parts) < workers:
            try:
                worker, part = results.get(timeout=POLL_S * 20)
            except queue.Empty:
                # Only a worker that has not reported can be missing; one that reported
                # has rightly ended. Its report may still be in the pipe: look once more.
                if _died(processes, set(range(workers)) - parts.keys()) and results.empty():
                    time.sleep(POLL_S)
                    if results.empty():
                        raise UserError("a load worker process ended without a result") \
                            from None
                continue
            if isinstance(part, str):
                raise UserError(f"load worker {worker} failed: {part}")
            parts[worker] = part
            if progress is not None:
                for _ in part.outcomes:
                    progress()
        return [parts[w] for w in range(workers)]
    finally:
        if not go.is_set():  # workers waiting for a moment that will not come
            for process in processes:
                process.terminate()
        for process in processes:
            process.join(5)
            if process.is_alive():
                process.terminate()
