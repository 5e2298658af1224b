"""The OpenAI-compatible routes as OpenAI clients see them: refusals in OpenAI's error shape
(400, `param` naming the field) that the official client raises as `BadRequestError`, an
unknown model as 404 `model_not_found`, harmless client fields accepted, token-id prompts."""

import httpx
import openai
import pytest

from llmbench.serve.app import ServerSettings, create_app, running_server

CAP = 16


@pytest.fixture(scope="module")
def url(tiny_lm):
    """A real uvicorn server for the tiny model on a loopback port."""
    app = create_app(tiny_lm, ServerSettings(max_new_tokens_cap=CAP, max_body_bytes=100_000))
    with running_server(app) as base:
        yield base


@pytest.fixture(scope="module")
def api(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi there"}]}


@pytest.mark.parametrize(("change", "param", "reason"), [
    ({"temperature": -1}, "temperature", "greater than or equal to 0"),
    ({"max_tokens": CAP + 1}, "max_tokens", f"less than or equal to {CAP}"),
    ({"n": 2}, "n", "not supported by llmbench serve"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages.0.content", "valid string"),
])
def test_a_refusal_is_a_bad_request_error_naming_the_field(api, change, param, reason):
    with pytest.raises(openai.BadRequestError) as caught:
        api.chat.completions.create(**{**CHAT, **change})
    error = caught.value
    assert error.status_code == 400
    assert (error.param, error.type, error.code) == (param, "invalid_request_error", None)
    assert reason in error.message


def test_invalid_input_is_400_in_openai_shape_on_every_v1_failure_path(url):
    post = lambda path, **kw: httpx.post(url + path, timeout=30, **kw)  # noqa: E731
    answers = {
        "field": post("/v1/completions", json={"prompt": "hi", "top_p": 2}),
        "form body": post("/v1/completions", data={"prompt": "hi"}),
        "broken JSON": post("/v1/completions", content=b'{"prompt": ',
                            headers={"content-type": "application/json"}),
        "too long": post("/v1/completions", json={"prompt": "hello " * 9000}),
    }
    for what, answer in answers.items():
        assert answer.status_code == 400, what
        error = answer.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}, what
        assert error["type"] == "invalid_request_error", what
    assert answers["field"].json()["error"]["param"] == "top_p"
    assert "Content-Type: application/json" in answers["form body"].json()["error"]["message"]
    assert "exceeds the model's context" in answers["too long"].json()["error"]["message"]
    large = post("/v1/completions", json={"prompt": "x" * 200_000})
    assert large.status_code == 413 and "exceeds 100000 bytes" in large.json()["error"]["message"]
    unknown = post("/v1/embeddings", json={})
    assert unknown.status_code == 404 and unknown.json()["error"]["message"] == "Not Found"
    native = post("/generate", json={"prompt": "hi", "top_p": 2})
    assert native.status_code == 422 and native.json()["detail"][0]["loc"] == ["body", "top_p"]


def test_an_unknown_model_is_404_model_not_found(api):
    listed = [m.id for m in api.models.list()]
    assert listed == ["tiny"]
    for create in (lambda: api.chat.completions.create(**{**CHAT, "model": "gpt-4o"}),
                   lambda: api.completions.create(model="gpt-4o", prompt="hi", max_tokens=2)):
        with pytest.raises(openai.NotFoundError) as caught:
            create()
        assert (caught.value.code, caught.value.param) == ("model_not_found", "model")
        assert "`gpt-4o` does not exist" in caught.value.message
        assert "`tiny`" in caught.value.message


def test_harmless_client_fields_are_accepted_and_ignored(api):
    plain = api.chat.completions.create(**CHAT, max_tokens=4, extra_body={"ignore_eos": True})
    decorated = api.chat.completions.create(
        **CHAT, max_tokens=4, user="u-1", store=False, metadata={"team": "perf"},
        parallel_tool_calls=False, service_tier="auto", extra_body={"ignore_eos": True})
    assert decorated.choices[0].message.content == plain.choices[0].message.content
    completion = api.completions.create(model="tiny", prompt="Hi", max_tokens=2, user="u-1",
                                        extra_body={"store": True, "metadata": {"a": "b"}})
    assert completion.usage.completion_tokens <= 2


def test_a_prompt_of_token_ids_equals_its_text(api, tiny_lm):
    text = "Once upon a time"
    ids = tiny_lm.tokenizer(text, add_special_tokens=False)["input_ids"]
    ask = lambda prompt: api.completions.create(  # noqa: E731
        model="tiny", prompt=prompt, max_tokens=5, extra_body={"ignore_eos": True})
    by_text = ask(text)
    for prompt in (ids, [ids]):
        by_ids = ask(prompt)
        assert by_ids.choices[0].text == by_text.choices[0].text
        assert by_ids.usage.prompt_tokens == len(ids) == by_text.usage.prompt_tokens
    for prompt, reason in [([len(tiny_lm.tokenizer) + 10**6], "outside the vocabulary"),
                           ([ids, ids], "pass one prompt"), ([], "non-empty"),
                           ([-1], "integers >= 0"), ([[1], "a"], "pass one prompt")]:
        with pytest.raises(openai.BadRequestError) as caught:
            ask(prompt)
        assert caught.value.param == "prompt" and reason in caught.value.message, prompt
