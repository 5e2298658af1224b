"""The server's request and response models: field types, limits and defaults, and the
validation behind its 422 answers.

Sampling defaults come from `SamplingParams`. Request models depend on the server's
`max_new_tokens` cap, so `request_models(cap)` builds them per app.
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .config import SamplingParams, default_of

# The API's floor for a sampling temperature; 0 means greedy. The sampler itself copes with
# any positive value (it shifts scores first), but anything below this is greedy in all but
# name, and a client sending it has most likely mixed up units.
MIN_TEMPERATURE = 1e-5
MAX_SEED = 2**63 - 1


def _valid_text(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text must be valid Unicode (it contains a lone surrogate)") from None
    return text


def _check_temperature(value: float) -> float:
    if 0 < value < MIN_TEMPERATURE:
        raise ValueError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE}")
    return value


_NEUTRAL = {"stop": (None, []), "n": (None, 1), "logprobs": (None, False, 0),
            "top_logprobs": (None, 0), "echo": (None, False), "best_of": (None, 1),
            "presence_penalty": (None, 0), "frequency_penalty": (None, 0),
            "logit_bias": (None, {}), "suffix": (None, ""), "tools": (None, []),
            "tool_choice": (None, "none"), "response_format": (None, {"type": "text"})}


def request_models(cap: int) -> dict[str, type[BaseModel]]:
    """The request models for a server whose max_new_tokens cap is `cap`."""
    d = lambda name: default_of(SamplingParams, name)  # noqa: E731
    default_new_tokens = min(d("max_new_tokens"), cap)

    class Sampling(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        temperature: float = Field(d("temperature"), ge=0, allow_inf_nan=False,
                                   description="0 is greedy")
        top_k: int = Field(d("top_k"), ge=0, description="0 is off")
        top_p: float = Field(d("top_p"), gt=0, le=1, allow_inf_nan=False,
                             description="1 is off")
        seed: int | None = Field(d("seed"), ge=0, le=MAX_SEED)
        ignore_eos: bool = Field(d("ignore_eos"),
                                 description="generate exactly the requested tokens")

        @field_validator("temperature")
        @classmethod
        def check_temperature(cls, value: float) -> float:
            return _check_temperature(value)

        def params(self, max_new_tokens: int | None) -> SamplingParams:
            return SamplingParams(
                max_new_tokens=default_new_tokens if max_new_tokens is None else max_new_tokens,
                temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                seed=self.seed, ignore_eos=self.ignore_eos)

    class GenerateRequest(Sampling):
        prompt: str = Field(min_length=1)
        max_new_tokens: int = Field(default_new_tokens, ge=1, le=cap)
        chat: bool = Field(True, description="format the prompt with the chat template")

        @field_validator("prompt")
        @classmethod
        def check_prompt(cls, value: str) -> str:
            return _valid_text(value)

    class StreamOptions(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        include_usage: bool = False

    class OpenAIRequest(Sampling):
        model: str | None = None
        max_tokens: int | None = Field(None, ge=1, le=cap)
        stream: bool = False
        stream_options: StreamOptions | None = None
        user: str | None = None
        stop: Any = None
        n: Any = None
        logprobs: Any = None
        top_logprobs: Any = None
        presence_penalty: Any = None
        frequency_penalty: Any = None
        logit_bias: Any = None

        @model_validator(mode="before")
        @classmethod
        def null_means_default(cls, data: Any) -> Any:
            # OpenAI clients may send `"temperature": null` for "not set".
            return {k: v for k, v in data.items() if v is not None} if isinstance(
                data, dict) else data

        @field_validator(*_NEUTRAL, mode="before", check_fields=False)
        @classmethod
        def check_unsupported(cls, value: Any, info) -> Any:
            if value not in _NEUTRAL[info.field_name]:
                raise ValueError("not supported by llmbench serve: omit it")
            return value

    class CompletionRequest(OpenAIRequest):
        prompt: str | list[str] = Field(description="a string, or a list of exactly one")
        echo: Any = None
        best_of: Any = None
        suffix: Any = None

        @field_validator("prompt")
        @classmethod
        def check_prompt(cls, value: str | list[str]) -> str:
            if isinstance(value, list):
                if len(value) != 1:
                    raise ValueError("pass one prompt (batching happens across requests)")
                value = value[0]
            return _valid_text(value)

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

    class ChatRequest(OpenAIRequest):
        messages: list[Message] = Field(min_length=1)
        max_completion_tokens: int | None = Field(None, ge=1, le=cap)
        tools: Any = None
        tool_choice: Any = None
        response_format: Any = None

    return {"generate": GenerateRequest, "completion": CompletionRequest,
            "chat": ChatRequest}


class GenerateResponse(BaseModel):
    text: str
    token_ids: list[int]
    input_tokens: int
    output_tokens: int
    ttft_ms: float
    latency_ms: float
    tokens_per_second: float
    finish_reason: str
