"""The server's request and response models: field types, limits, defaults and aliases, and
the validation behind its refusals.

Every request model is strict, refuses unknown fields, and reads `null` for an optional
field as "use the default". Sampling defaults come from `SamplingParams`. Request models
depend on the server's `max_new_tokens` cap, so `request_models(cap)` builds them per app.
"""

import json
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from llmbench.engine.config import SamplingParams, default_of

# The API's floor for a sampling temperature; 0 means greedy. The sampler itself copes with
# any positive value (it shifts scores first), but anything below this is greedy in all but
# name, and a client sending it has most likely mixed up units.
MIN_TEMPERATURE = 1e-5
MAX_SEED = 2**63 - 1
# The names a native request may give its token limit: ours first, then the names other
# small servers use for it.
MAX_NEW_TOKENS_NAMES = ("max_new_tokens", "max_output_tokens", "token_limit")


def _names(field) -> list[str]:
    alias = field.validation_alias
    return list(alias.choices) if isinstance(alias, AliasChoices) else []


def _document_aliases(schema: dict, model: type[BaseModel]) -> None:
    # JSON Schema lists a field under its first name only; list every other name too, so
    # that the published schema accepts what the server accepts.
    for name, field in model.model_fields.items():
        for alias in _names(field)[1:]:
            schema["properties"][alias] = {**schema["properties"][name], "title": alias,
                                           "description": f"another name for `{name}`; "
                                                          "send one name only"}


class _Request(BaseModel):
    """Strict types, unknown fields refused, `null` for an optional field meaning its default,
    and at most one name per field."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_document_aliases)

    @model_validator(mode="before")
    @classmethod
    def one_name_per_field(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, field in cls.model_fields.items():
                sent = [n for n in _names(field) if n in data]
                if len(sent) > 1:
                    raise ValueError(f"{' and '.join(sent)} are names of the same field "
                                     f"({name}): send only one")
        return data

    @field_validator("*", mode="before")
    @classmethod
    def null_means_default(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields[info.field_name]
        if value is None and not field.is_required():
            return field.get_default(call_default_factory=True)
        return value


def _valid_text(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text must be valid Unicode (it contains a lone surrogate)") from None
    return text


def _temperature_floor(schema: dict) -> None:
    # What the validator below enforces: 0, or at least MIN_TEMPERATURE.
    schema["anyOf"] = [{"type": "number", "const": 0},
                       {"type": "number", "minimum": MIN_TEMPERATURE}, {"type": "null"}]


# OpenAI parameters that would change the work done: refused unless neutral. The field types
# below accept exactly these values, so the schema says so too.
_NEUTRAL: dict[str, tuple] = {
    "stop": ([],), "n": (1,), "logprobs": (False, 0), "top_logprobs": (0,), "echo": (False,),
    "best_of": (1,), "presence_penalty": (0,), "frequency_penalty": (0,),
    "logit_bias": ({},), "suffix": ("",), "tools": ([],), "tool_choice": ("none",),
    "response_format": ({"type": "text"},)}
_NOTE = {name: "not supported: accepted only as " + " or ".join(map(json.dumps, values))
         + " (or null)" for name, values in _NEUTRAL.items()}
_Zero = Annotated[float, Field(ge=0, le=0)]
_TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


def _is_neutral(value: Any, name: str) -> bool:
    # Equal and of the same JSON type: `true` is not the neutral `1`, `false` not `0`.
    return any(value == n and (type(value) is type(n) or {type(value), type(n)} <= {int, float})
               for n in _NEUTRAL[name])


def _one_prompt(value: Any) -> Any:
    """A completion prompt as text or token ids: a string, a list of ints, or a list holding
    exactly one of those; anything else is refused with one message."""
    if isinstance(value, list) and value and all(isinstance(v, (str, list)) for v in value):
        if len(value) != 1:
            raise ValueError("pass one prompt (batching happens across requests)")
        value = value[0]
    if isinstance(value, str):
        return _valid_text(value)
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        raise ValueError("prompt must be a string or a list of token ids (integers), or a "
                         "list holding one of those")
    if not value or min(value) < 0:
        raise ValueError("token ids must be a non-empty list of integers >= 0")
    return value


def request_models(cap: int) -> dict[str, type[BaseModel]]:
    """The request models for a server whose max_new_tokens cap is `cap`."""
    d = lambda name: default_of(SamplingParams, name)  # noqa: E731
    default_new_tokens = min(d("max_new_tokens"), cap)

    class Sampling(_Request):
        temperature: float | None = Field(
            d("temperature"), ge=0, allow_inf_nan=False, json_schema_extra=_temperature_floor,
            description=f"0 is greedy; otherwise at least {MIN_TEMPERATURE}")
        top_k: int | None = Field(d("top_k"), ge=0, description="0 is off")
        top_p: float | None = Field(d("top_p"), gt=0, le=1, allow_inf_nan=False,
                                    description="1 is off; the best token is always kept")
        seed: int | None = Field(d("seed"), ge=0, le=MAX_SEED,
                                 description="fixes the sampling; null draws a fresh seed")
        ignore_eos: bool | None = Field(d("ignore_eos"),
                                        description="generate exactly the requested tokens")

        @field_validator("temperature")
        @classmethod
        def check_temperature(cls, value: float) -> float:
            if 0 < value < MIN_TEMPERATURE:
                raise ValueError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE}")
            return value

        def params(self, max_new_tokens: int | None) -> SamplingParams:
            return SamplingParams(
                max_new_tokens=default_new_tokens if max_new_tokens is None else max_new_tokens,
                temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                seed=self.seed, ignore_eos=self.ignore_eos)

    class GenerateRequest(Sampling):
        prompt: str = Field(min_length=1, description="the text to continue or answer")
        max_new_tokens: int | None = Field(
            default_new_tokens, ge=1, le=cap, validation_alias=AliasChoices(
                *MAX_NEW_TOKENS_NAMES),
            description="tokens to generate at most; also accepted as " + " or ".join(
                MAX_NEW_TOKENS_NAMES[1:]))
        chat: bool | None = Field(True, description="format the prompt with the chat template")

        @field_validator("prompt")
        @classmethod
        def check_prompt(cls, value: str) -> str:
            return _valid_text(value)

    class StreamOptions(_Request):
        include_usage: bool | None = Field(False, description="end with a chunk holding "
                                                             "the token counts")

    ignored = "accepted and ignored"

    class OpenAIRequest(Sampling):
        model: str | None = Field(None, description="the served model (see /v1/models); "
                                                    "null or absent means that one")
        max_tokens: int | None = Field(None, ge=1, le=cap, description="tokens to generate "
                                                                      "at most")
        stream: bool | None = Field(False, description="answer as Server-Sent Events")
        stream_options: StreamOptions | None = Field(None, description="read when `stream` is true")
        user: str | None = Field(None, description=ignored)
        store: bool | None = Field(None, description=ignored)
        metadata: dict[str, str] | None = Field(None, description=ignored)
        parallel_tool_calls: bool | None = Field(None, description=ignored)
        service_tier: str | None = Field(None, description=ignored)
        stop: Annotated[list[str], Field(max_length=0)] | None = Field(
            None, description=_NOTE["stop"])
        n: Literal[1] | None = Field(None, description=_NOTE["n"])
        logprobs: Literal[False, 0] | None = Field(None, description=_NOTE["logprobs"])
        top_logprobs: Literal[0] | None = Field(None, description=_NOTE["top_logprobs"])
        presence_penalty: _Zero | None = Field(None, description=_NOTE["presence_penalty"])
        frequency_penalty: _Zero | None = Field(None, description=_NOTE["frequency_penalty"])
        logit_bias: Annotated[dict[str, float], Field(max_length=0)] | None = Field(
            None, description=_NOTE["logit_bias"])

        @field_validator(*_NEUTRAL, mode="before", check_fields=False)
        @classmethod
        def check_unsupported(cls, value: Any, info: ValidationInfo) -> Any:
            if value is not None and not _is_neutral(value, info.field_name):
                raise ValueError("not supported by llmbench serve: omit it")
            return value

    class CompletionRequest(OpenAIRequest):
        prompt: (str | Annotated[list[str], Field(min_length=1, max_length=1)] | _TokenIds
                 | Annotated[list[_TokenIds], Field(min_length=1, max_length=1)]) = Field(
            description="text, or token ids (a list of integers), or a list of exactly one "
                        "of those")
        echo: Literal[False] | None = Field(None, description=_NOTE["echo"])
        best_of: Literal[1] | None = Field(None, description=_NOTE["best_of"])
        suffix: Literal[""] | None = Field(None, description=_NOTE["suffix"])

        @field_validator("prompt", mode="before")
        @classmethod
        def check_prompt(cls, value: Any) -> Any:
            return _one_prompt(value)

    class Message(BaseModel):
        model_config = ConfigDict(extra="ignore", strict=True)
        role: Literal["system", "developer", "user", "assistant"]
        content: str | list[dict[str, Any]]

        @field_validator("content")
        @classmethod
        def check_content(cls, value: str | list[dict[str, Any]]) -> str:
            if isinstance(value, list):
                if any(part.get("type") != "text" or not isinstance(part.get("text"), str)
                       for part in value):
                    raise ValueError("only text content parts are supported")
                value = "".join(part["text"] for part in value)
            return _valid_text(value)

    class ResponseFormat(_Request):
        type: Literal["text"]

    class ChatRequest(OpenAIRequest):
        messages: list[Message] = Field(min_length=1, description="formatted with the "
                                                                  "model's chat template")
        max_completion_tokens: int | None = Field(None, ge=1, le=cap,
                                                  description="max_tokens by its newer name; "
                                                              "if both are given they must "
                                                              "agree")
        tools: Annotated[list[dict[str, Any]], Field(max_length=0)] | None = Field(
            None, description=_NOTE["tools"])
        tool_choice: Literal["none"] | None = Field(None, description=_NOTE["tool_choice"])
        response_format: ResponseFormat | None = Field(None,
                                                       description=_NOTE["response_format"])

    return {"generate": GenerateRequest, "completion": CompletionRequest,
            "chat": ChatRequest}


class Timing(BaseModel):
    ttft_ms: float = Field(description="time to the first token")
    latency_ms: float = Field(description="time to the last token")


class GenerateResponse(BaseModel):
    """One generation and its timings, counted from the request's arrival. Some metrics are
    also given under the names other small servers use, so their clients read them as is."""

    text: str
    token_ids: list[int]
    input_tokens: int = Field(description="prompt tokens, after any chat template")
    output_tokens: int = Field(description="tokens generated")
    ttft_ms: float = Field(description="time to the first token")
    latency_ms: float = Field(description="time to the last token")
    tokens_per_second: float = Field(description="output_tokens / latency")
    decode_ms_per_token: float | None = Field(
        description="the median time between this request's consecutive tokens as the model "
                    "made them, inside the server (no HTTP): the engine's pace, against which "
                    "a client's inter-token latency shows the serving overhead; null below 2 "
                    "tokens")
    finish_reason: str = Field(description='"stop" (end of sequence) or "length"')
    latency_s: float = Field(description="latency_ms in seconds")
    timing: Timing = Field(description="ttft_ms and latency_ms again")
    token_count: int = Field(description="output_tokens again")
    throughput: float = Field(description="tokens_per_second again")
    cache_usage: Literal["true"] = Field(description='whether the KV cache was used, as a '
                                                    'string: always "true" here')


def with_other_names(metrics: dict) -> dict:
    """`metrics` plus the same values under the other names `GenerateResponse` lists."""
    return {**metrics, "latency_s": metrics["latency_ms"] / 1e3,
            "timing": {"ttft_ms": metrics["ttft_ms"], "latency_ms": metrics["latency_ms"]},
            "token_count": metrics["output_tokens"], "throughput": metrics["tokens_per_second"],
            "cache_usage": "true"}
