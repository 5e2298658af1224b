"""The OpenAPI document as the server enforces it.

FastAPI passes every schema through its own OpenAPI model, which types `minimum` and
`maximum` as floats: an integer limit is then published as `8.0`, and 2**63 - 1 as
9.223372036854776e+18, which is 2**63 and so admits a value the server refuses. Here the
limits pydantic generated are put back as they were. FastAPI also declares a 422 for every
route with a body, which the OpenAI-compatible routes never answer (they answer 400).
"""

from collections.abc import Iterable

from fastapi import FastAPI
from pydantic import BaseModel

from llmbench.serve.http_errors import is_openai

LIMITS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _restore(published, exact) -> None:
    if isinstance(published, dict) and isinstance(exact, dict):
        for key, value in exact.items():
            if key in published:
                if key in LIMITS:
                    published[key] = value
                else:
                    _restore(published[key], value)
    elif isinstance(published, list) and isinstance(exact, list) and len(published) == len(
            exact):
        for item, exact_item in zip(published, exact, strict=True):
            _restore(item, exact_item)


def publish_as_enforced(app: FastAPI, models: Iterable[type[BaseModel]]) -> None:
    """Make `app.openapi()` give the numeric limits of `models` (and the models they use)
    exactly as pydantic generates them, and no 422 on the OpenAI-compatible routes."""
    generate = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            spec = generate()
            for path, operations in spec["paths"].items():
                for operation in operations.values() if is_openai(path) else ():
                    operation["responses"].pop("422", None)
            components = spec["components"]["schemas"]
            for model in models:
                exact = model.model_json_schema(ref_template="#/components/schemas/{model}")
                for name, schema in {**exact.pop("$defs", {}), model.__name__: exact}.items():
                    if name in components:
                        _restore(components[name], schema)
        return app.openapi_schema

    app.openapi = openapi
