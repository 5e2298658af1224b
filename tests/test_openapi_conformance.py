"""The published OpenAPI document says what the server enforces.

For every field of every request body, read from `/openapi.json` (nested objects included):
the field has a type (a refused field typed "any" says nothing), `null` is accepted exactly
when the schema declares it nullable, integer limits are published as integers, and at each
numeric limit or constant, and just either side of it, the server accepts exactly the values
the schema admits. The schema is judged by the small JSON Schema evaluator below, which
covers the keywords these schemas use.
"""

import copy
import math
import operator
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from llmbench.serve.app import ServerSettings, create_app

CAP = 4
BASES = {  # the smallest valid body of each route
    "/generate": {"prompt": "hi"},
    "/stream": {"prompt": "hi"},
    "/v1/completions": {"prompt": "hi"},
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "hi"}]},
}
LIMITS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


@pytest.fixture(scope="module")
def client(tiny_lm):
    app = create_app(tiny_lm, ServerSettings(max_new_tokens_cap=CAP))
    yield TestClient(app)
    app.state.scheduler.close()


@pytest.fixture(scope="module")
def spec(client) -> dict:
    return client.get("/openapi.json").json()


def _resolve(spec: dict, schema: dict) -> dict:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _fields(spec: dict, schema: dict, path: tuple = ()) -> Iterator[tuple[tuple, dict]]:
    """(path in the body, schema) of each property, descending into objects and arrays of
    objects (a path step 0 is the first array item)."""
    for name, prop in _resolve(spec, schema).get("properties", {}).items():
        yield (*path, name), prop
        for branch in [prop, *prop.get("anyOf", [])]:
            branch = _resolve(spec, branch)
            if branch.get("type") == "object" and "properties" in branch:
                yield from _fields(spec, branch, (*path, name))
            items = _resolve(spec, branch.get("items", {}))
            if branch.get("type") == "array" and "properties" in items:
                yield from _fields(spec, items, (*path, name, 0))


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _same(a, b) -> bool:
    return a == b and (type(a) is type(b) or (_is_number(a) and _is_number(b)))


TYPES = {"null": lambda v: v is None, "boolean": lambda v: isinstance(v, bool),
         "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
         "number": _is_number, "string": lambda v: isinstance(v, str),
         "array": lambda v: isinstance(v, list), "object": lambda v: isinstance(v, dict)}


def admits(spec: dict, schema: dict, value) -> bool:
    """Whether `schema` admits `value` (the keywords these schemas use)."""
    schema = _resolve(spec, schema)
    if "anyOf" in schema and not any(admits(spec, s, value) for s in schema["anyOf"]):
        return False
    if "const" in schema and not _same(value, schema["const"]):
        return False
    if "enum" in schema and not any(_same(value, e) for e in schema["enum"]):
        return False
    if "type" in schema and not TYPES[schema["type"]](value):
        return False
    if _is_number(value):
        checks = {"minimum": operator.ge, "maximum": operator.le,
                  "exclusiveMinimum": operator.gt, "exclusiveMaximum": operator.lt}
        return all(checks[k](value, schema[k]) for k in LIMITS if k in schema)
    return True


def _branches(spec: dict, schema: dict) -> Iterator[dict]:
    schema = _resolve(spec, schema)
    yield schema
    for branch in schema.get("anyOf", []):
        yield from _branches(spec, branch)


def _probes(spec: dict, schema: dict) -> set:
    """Each numeric limit and constant of `schema`, and the values just either side."""
    values = set()
    for branch in _branches(spec, schema):
        marks = [branch[k] for k in LIMITS if k in branch]
        marks += [v for v in [branch.get("const"), *branch.get("enum", [])] if _is_number(v)]
        for mark in marks:
            if branch.get("type") == "integer" or type(mark) is int:
                mark = int(mark)  # an integer field is sent integers, also for `8.0`
                values |= {mark - 1, mark, mark + 1}
            if branch.get("type") != "integer":
                values |= {math.nextafter(mark, -math.inf), float(mark),
                           math.nextafter(mark, math.inf)}
    return values


def _body_with(route: str, path: tuple, value) -> dict:
    body = copy.deepcopy(BASES[route])
    node = body
    for step, next_step in zip(path, path[1:], strict=False):
        if isinstance(node, dict) and not isinstance(node.get(step), (dict, list)):
            node[step] = [{}] if next_step == 0 else {}
        node = node[step]
    node[path[-1]] = value
    return body


def _accepted(client, route: str, body: dict) -> bool:
    response = client.post(route, json=body)
    assert response.status_code in (200, 400, 422), (route, body, response.text[:300])
    return response.status_code == 200


def _request_fields(spec: dict, route: str) -> list[tuple[tuple, dict]]:
    body = spec["paths"][route]["post"]["requestBody"]["content"]["application/json"]
    return list(_fields(spec, body["schema"]))


@pytest.mark.parametrize("route", BASES)
def test_every_field_has_a_type(spec, route):
    untyped = [".".join(map(str, path)) for path, prop in _request_fields(spec, route)
               if not {"type", "anyOf", "const", "enum", "$ref"} & set(prop)]
    assert untyped == []


@pytest.mark.parametrize("route", BASES)
def test_null_is_accepted_exactly_where_declared(client, spec, route):
    wrong = [(".".join(map(str, path)), admits(spec, prop, None))
             for path, prop in _request_fields(spec, route)
             if admits(spec, prop, None) != _accepted(client, route, _body_with(route, path, None))]
    assert wrong == [], "(field, declared nullable) where the server disagrees"


@pytest.mark.parametrize("route", BASES)
def test_integer_limits_are_integers(spec, route):
    floats = [(".".join(map(str, path)), key, branch[key])
              for path, prop in _request_fields(spec, route)
              for branch in _branches(spec, prop) if branch.get("type") == "integer"
              for key in LIMITS if key in branch and type(branch[key]) is not int]
    assert floats == []


@pytest.mark.parametrize("route", BASES)
def test_numeric_limits_are_the_ones_enforced(client, spec, route):
    wrong, probed = [], set()
    for path, prop in _request_fields(spec, route):
        for value in sorted(_probes(spec, prop)):
            probed.add(".".join(map(str, path)))
            declared = admits(spec, prop, value)
            if declared != _accepted(client, route, _body_with(route, path, value)):
                wrong.append((".".join(map(str, path)), value, declared))
    assert wrong == [], "(field, value, declared acceptable) where the server disagrees"
    assert {"temperature", "top_k", "top_p", "seed"} <= probed, "limits missing from the schema"


def test_the_evaluator_reads_limits_constants_and_unions(spec):
    temperature = {"anyOf": [{"type": "number", "const": 0},
                             {"type": "number", "minimum": 1e-5}, {"type": "null"}]}
    verdicts = [admits(spec, temperature, v) for v in (0, 0.0, 1e-6, 1e-5, 1, None, False, "0")]
    assert verdicts == [True, True, False, True, True, True, False, False]
    top_p = {"type": "number", "exclusiveMinimum": 0, "maximum": 1}
    assert [admits(spec, top_p, v) for v in (0, 5e-324, 1, 1.0000000000000002)] == [
        False, True, True, False]
    assert _probes(spec, {"type": "integer", "minimum": 1, "maximum": 4}) == {0, 1, 2, 3, 4, 5}
    assert _body_with("/v1/chat/completions", ("messages", 0, "role"), None) == {
        "messages": [{"role": None, "content": "hi"}]}
    assert _body_with("/v1/completions", ("stream_options", "include_usage"), 1) == {
        "prompt": "hi", "stream_options": {"include_usage": 1}}
