"""What every route does with a validated prompt: submit it to the scheduler, read its tokens
back with their text deltas while watching for the client leaving, and turn the scheduler's
refusals and failed outcomes into HTTP errors."""

import asyncio
from collections.abc import AsyncIterator

from fastapi import HTTPException
from fastapi.exceptions import RequestValidationError
from starlette.requests import Request as HTTPRequest

from llmbench.engine.config import SamplingParams
from llmbench.engine.loop import TokenEvent
from llmbench.engine.models import LoadedModel
from llmbench.errors import UserError
from llmbench.serve.request import Outcome, Request
from llmbench.serve.scheduler import Scheduler, SchedulerClosed, SchedulerFull
from llmbench.serve.streaming import IncrementalDetokenizer


def invalid(loc: list, msg: str) -> RequestValidationError:
    """A 422 naming the field at `loc`, as a failed validation would."""
    return RequestValidationError([{"loc": loc, "msg": msg, "type": "value_error"}])


def failure(outcome: Outcome) -> HTTPException:
    """The HTTP error for a request that was cancelled or failed."""
    return HTTPException(503 if outcome.finish_reason == "cancelled" else 500,
                         outcome.error or "the server is shutting down")


class Generations:
    """The scheduler of `lm` as the routes use it."""

    def __init__(self, lm: LoadedModel, scheduler: Scheduler):
        self.lm, self.scheduler = lm, scheduler

    def submit(self, prompt_ids: list[int], params: SamplingParams, prompt_loc: list) -> Request:
        try:
            return self.scheduler.submit(prompt_ids, params, loop=asyncio.get_running_loop())
        except UserError as exc:
            raise invalid(prompt_loc, str(exc)) from None
        except (SchedulerFull, SchedulerClosed) as exc:
            raise HTTPException(503, f"server busy: {exc}; retry later",
                                headers={"Retry-After": "1"}) from None

    async def run(self, http: HTTPRequest, request: Request
                  ) -> AsyncIterator[tuple[TokenEvent | Outcome, str]]:
        """(item, text delta) per token, then (outcome, final delta). Leaving early, or the
        client disconnecting, cancels the request."""
        async def watch():
            while not await http.is_disconnected():
                await asyncio.sleep(0.2)
            request.cancel()

        watcher = asyncio.create_task(watch())
        text = IncrementalDetokenizer(self.lm.tokenizer)
        try:
            async for item in request:
                yield item, (text.push(item.token_id) if isinstance(item, TokenEvent)
                             else text.flush())
        finally:
            watcher.cancel()
            request.cancel()
