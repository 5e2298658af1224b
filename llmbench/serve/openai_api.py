"""The OpenAI-compatible routes: `POST /v1/completions`, `POST /v1/chat/completions` (plain,
or streamed as `chat.completion.chunk` / `text_completion` events ending in `data: [DONE]`)
and `GET /v1/models`, added to the app by `server.create_app`."""

import time
import uuid
from collections.abc import AsyncIterator

from fastapi import FastAPI
from pydantic import BaseModel
from starlette.requests import Request as HTTPRequest

from llmbench.engine.loop import TokenEvent
from llmbench.engine.prompts import encode, encode_chat
from llmbench.errors import UserError
from llmbench.serve.generations import Generations, failure, invalid
from llmbench.serve.http_errors import OPENAI_RESPONSES, OpenAIError
from llmbench.serve.request import Outcome
from llmbench.serve.streaming import event_stream, sse


def register(app: FastAPI, generations: Generations, schemas: dict[str, type[BaseModel]]
             ) -> None:
    """Add the OpenAI-compatible routes to `app`; `schemas` are its request models."""
    lm = generations.lm
    CompletionRequest, ChatRequest = schemas["completion"], schemas["chat"]  # noqa: N806

    vocab_size = lm.model.get_input_embeddings().num_embeddings

    def check_model(body) -> None:
        # A request for another model must not get this one's answer.
        if body.model is not None and body.model != lm.name:
            raise OpenAIError(404, f"The model `{body.model}` does not exist: this server "
                                   f"serves `{lm.name}` (see /v1/models)", param="model",
                              code="model_not_found")

    async def respond(http: HTTPRequest, body, ids: list[int], max_tokens: int | None,
                      kind: str):
        request = generations.submit(ids, body.params(max_tokens),
                                     ["body", "prompt" if kind == "text" else "messages"])
        head = {"id": f"{'cmpl' if kind == 'text' else 'chatcmpl'}-{uuid.uuid4().hex}",
                "object": "text_completion" if kind == "text" else "chat.completion",
                "created": int(time.time()), "model": lm.name}

        def usage(outcome: Outcome) -> dict:
            return {"prompt_tokens": outcome.input_tokens,
                    "completion_tokens": outcome.output_tokens,
                    "total_tokens": outcome.input_tokens + outcome.output_tokens}

        def choice(text: str | None, finish: str | None, stream: bool) -> dict:
            if kind == "text":
                return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
            if stream:
                delta = {} if text is None else {"content": text}
                return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return {"index": 0, "message": {"role": "assistant", "content": text},
                    "logprobs": None, "finish_reason": finish}

        if not body.stream:
            text = ""
            async for _, delta in generations.run(http, request):
                text += delta
            outcome = request.outcome
            if outcome.is_failure:
                raise failure(outcome)
            return {**head, "choices": [choice(text, outcome.finish_reason, False)],
                    "usage": usage(outcome)}

        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        chunk_head = {**head, "object": head["object"] + ("" if kind == "text" else ".chunk")}
        extra = {"usage": None} if include_usage else {}

        async def chunks() -> AsyncIterator[str]:
            if kind == "chat":
                yield sse({**chunk_head, "choices": [{"index": 0, "delta": {
                    "role": "assistant", "content": ""}, "logprobs": None,
                    "finish_reason": None}], **extra})
            async for item, delta in generations.run(http, request):
                if isinstance(item, TokenEvent):
                    if delta:
                        yield sse({**chunk_head, "choices": [choice(delta, None, True)], **extra})
                    continue
                if item.is_failure:
                    yield sse({"error": {"message": item.error or "cancelled",
                                         "type": "server_error", "param": None, "code": None}})
                    break
                yield sse({**chunk_head, "choices": [choice(delta or None, item.finish_reason,
                                                            True)], **extra})
                if include_usage:
                    yield sse({**chunk_head, "choices": [], "usage": usage(item)})
            yield sse("[DONE]")

        return event_stream(chunks(), request)

    @app.post("/v1/completions", responses=OPENAI_RESPONSES)
    async def completions(body: CompletionRequest, http: HTTPRequest):
        """OpenAI-compatible text completion: the prompt is raw text (no chat template) or
        token ids."""
        check_model(body)
        if isinstance(body.prompt, str):
            ids = encode(lm.tokenizer, body.prompt, chat=False)
        elif max(body.prompt) >= vocab_size:
            raise invalid(["body", "prompt"], f"token id {max(body.prompt)} is outside the "
                                              f"vocabulary (0..{vocab_size - 1})")
        else:
            ids = body.prompt
        return await respond(http, body, ids, body.max_tokens, "text")

    @app.post("/v1/chat/completions", responses=OPENAI_RESPONSES)
    async def chat_completions(body: ChatRequest, http: HTTPRequest):
        """OpenAI-compatible chat completion through the model's chat template."""
        check_model(body)
        if body.max_tokens and body.max_completion_tokens and \
                body.max_tokens != body.max_completion_tokens:
            raise invalid(["body", "max_completion_tokens"],
                          "differs from max_tokens: pass one of them")
        messages = [{"role": m.role, "content": m.content} for m in body.messages]
        try:
            ids = encode_chat(lm.tokenizer, messages)
        except UserError as exc:
            raise invalid(["body", "messages"], str(exc)) from None
        return await respond(http, body, ids, body.max_completion_tokens or body.max_tokens,
                             "chat")

    @app.get("/v1/models")
    async def models() -> dict:
        """The one model served, in OpenAI's list format."""
        return {"object": "list", "data": [{"id": lm.name, "object": "model", "created": 0,
                                            "owned_by": "llmbench"}]}
