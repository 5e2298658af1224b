"""How the server answers a refused or failed request.

Native routes answer `{"detail": ...}`: invalid input is 422 with `[{loc, msg, type}]` naming
each field, as FastAPI does. The OpenAI-compatible routes (`/v1/...`) answer in OpenAI's
shape, `{"error": {"message", "type", "param", "code"}}`, with 400 for invalid input as
vLLM does, so that the official client raises `openai.BadRequestError` showing the reason.
"""

import logging
import os

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException
from starlette.requests import Request

from llmbench.errors import UserError

log = logging.getLogger("llmbench.server")

NOT_JSON = "the body must be JSON, sent with the header `Content-Type: application/json`"


class OpenAIError(Exception):
    """A refusal with OpenAI's error fields, e.g. 404 `model_not_found`."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


class OpenAIErrorFields(BaseModel):
    message: str
    type: str = Field(description='"invalid_request_error" (4xx) or "server_error" (5xx)')
    param: str | None = Field(description="the field at fault, dotted (messages.0.content)")
    code: str | None = Field(description='e.g. "model_not_found"')


class OpenAIErrorBody(BaseModel):
    error: OpenAIErrorFields


# The refusals of the OpenAI-compatible routes, for their OpenAPI description.
OPENAI_RESPONSES = {status: {"model": OpenAIErrorBody, "description": text} for status, text in {
    400: "invalid request: `param` names the field", 404: "unknown model",
    413: "body too large", 503: "server busy or shutting down"}.items()}


def is_openai(path: str) -> bool:
    return path.startswith("/v1/")


def error_response(path: str, status: int, message: str, param: str | None = None,
                   code: str | None = None, headers: dict | None = None) -> JSONResponse:
    """The answer to a refusal on `path`: OpenAI's shape under /v1/, FastAPI's elsewhere."""
    if is_openai(path):
        kind = "invalid_request_error" if status < 500 else "server_error"
        body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    else:
        body = {"detail": message}
    return JSONResponse(body, status_code=status, headers=headers)


def _is_json(content_type: str) -> bool:
    # FastAPI parses the body as JSON only for these media types; any other body reaches
    # validation as bytes and fails with a puzzling "Input should be a valid dictionary".
    media = content_type.partition(";")[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def invalid_response(request: Request, errors: list[dict]) -> JSONResponse:
    """422 `detail` natively, 400 in OpenAI's shape on /v1/, for failed validation."""
    content_type = request.headers.get("content-type")
    if content_type is not None and not _is_json(content_type):
        errors = [{"loc": ["body"], "msg": f"{NOT_JSON} (got {content_type!r})",
                   "type": "content_type"}]
    if not is_openai(request.url.path):
        return JSONResponse({"detail": errors}, status_code=422)
    fields = [".".join(error["loc"][1:]) for error in errors]
    message = "; ".join(f"{field}: {error['msg']}" if field else error["msg"]
                        for field, error in zip(fields, errors, strict=True))
    # One value failing every member of a union gives one error per member, each with the
    # member's name appended (messages.0.content.str, ...): the field is their common part.
    common = os.path.commonprefix([error["loc"][1:] for error in errors])
    param = ".".join(common) if common else fields[0]
    return error_response(request.url.path, 400, message, param=param or None)


def install(app: FastAPI, max_body_bytes: int) -> None:
    """Answer every refusal and failure of `app` as the module docstring says."""
    app.add_middleware(_BodyLimit, max_bytes=max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        # Only loc, msg and type: `input` and `ctx` may hold values JSON cannot encode (NaN).
        return invalid_response(request, [
            {"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", "")),
             "type": str(e.get("type", ""))} for e in exc.errors()])

    @app.exception_handler(UserError)
    async def user_error(request: Request, exc: UserError):
        return invalid_response(request, [{"loc": ["body"], "msg": str(exc),
                                           "type": "value_error"}])

    @app.exception_handler(OpenAIError)
    async def openai_error(request: Request, exc: OpenAIError):
        return error_response(request.url.path, exc.status, exc.message, exc.param, exc.code)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        return error_response(request.url.path, exc.status_code, str(exc.detail),
                              headers=exc.headers)

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception):
        log.exception("unhandled error", exc_info=exc)
        return error_response(request.url.path, 500, f"internal error ({type(exc).__name__}); "
                                                     "see the server log")


class _BodyLimit:
    """Answer 413 before the app sees a body over `max_bytes` (declared or streamed)."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_large = error_response(scope["path"], 413,
                                   f"request body exceeds {self.max_bytes} bytes")
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return await too_large(scope, receive, send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before sending its body
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await too_large(scope, receive, send)
            if not message.get("more_body", False):
                break
        pending = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replay():
            return pending.pop() if pending else await receive()

        await self.app(scope, replay, send)
