"""Structured output through the proxy against a real llama-server: each form constrains or is a 400.

The echo model's free output is token soup that never starts with ``{``; constrained output must be
JSON of the schema (or, for "any object" cut off by ``max_tokens``, at least start as one).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import Stack, real_stack

pytestmark = [pytest.mark.native, pytest.mark.slow]

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
    "required": ["answer"],
    "additionalProperties": False,
}
MESSAGES = [{"role": "user", "content": "Answer yes or no."}]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    models = [{"name": "demo", "parallel": 1, "ctx_size": 2048, "thinking": False, "threads": 1}]
    s = real_stack(tmp_path_factory.mktemp("structured"), echo_model, bin_info, models=models)
    yield s
    s.close()


def chat(stack: Stack, **extra: Any) -> httpx.Response:
    body = {"model": "demo", "messages": MESSAGES, "max_tokens": 24, "temperature": 0, **extra}
    return httpx.post(stack.url + "/v1/chat/completions", json=body, timeout=60)


def completion(stack: Stack, **extra: Any) -> httpx.Response:
    body = {"model": "demo", "prompt": "Answer yes or no:", "max_tokens": 24, "temperature": 0, **extra}
    return httpx.post(stack.url + "/v1/completions", json=body, timeout=60)


def test_free_output_is_not_json(stack: Stack) -> None:
    assert not chat(stack).json()["choices"][0]["message"]["content"].lstrip().startswith("{")
    assert not chat(stack, response_format={"type": "text"}).json()["choices"][0]["message"]["content"].startswith("{")


@pytest.mark.parametrize(
    "fields",
    [
        {"response_format": {"type": "json_schema", "json_schema": {"name": "yn", "schema": SCHEMA, "strict": True}}},
        {"response_format": {"type": "json_object", "schema": SCHEMA}},
        {"json_schema": SCHEMA},
    ],
    ids=["json_schema", "json_object+schema", "native-json_schema"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_chat_schema_forms_constrain(stack: Stack, fields: dict[str, Any], stream: bool) -> None:
    r = chat(stack, stream=stream, **fields)
    assert r.status_code == 200, r.text
    if stream:
        text = "".join(
            (json.loads(e[6:])["choices"] or [{}])[0].get("delta", {}).get("content") or ""
            for e in r.text.split("\n\n")
            if e.startswith("data: {")
        )
    else:
        text = r.json()["choices"][0]["message"]["content"]
    assert json.loads(text)["answer"] in ("yes", "no")


def test_json_object_constrains_to_an_object(stack: Stack) -> None:
    answer = chat(stack, response_format={"type": "json_object"}).json()["choices"][0]
    text = answer["message"]["content"]
    assert text.lstrip().startswith("{")
    if answer["finish_reason"] == "stop":
        assert isinstance(json.loads(text), dict)


@pytest.mark.parametrize(
    "fields",
    [
        {"response_format": {"type": "json_schema", "json_schema": {"name": "yn", "schema": SCHEMA}}},
        {"response_format": {"type": "json_object", "schema": SCHEMA}},
        {"json_schema": SCHEMA},
    ],
    ids=["response_format-mapped", "json_object-mapped", "native"],
)
def test_completions_honour_response_format(stack: Stack, fields: dict[str, Any]) -> None:
    """llama-server's /v1/completions ignores response_format: the proxy maps it onto json_schema."""
    stack.recorder.clear()
    r = completion(stack, **fields)
    assert r.status_code == 200, r.text
    assert json.loads(r.json()["choices"][0]["text"])["answer"] in ("yes", "no")
    sent = stack.recorder.bodies("/v1/completions")[0]
    assert sent["json_schema"] == SCHEMA and "response_format" not in sent


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"response_format": "json"}, "response_format"),
        ({"response_format": {"schema": SCHEMA}}, "response_format.type"),
        ({"response_format": {"type": "xml"}}, "response_format.type"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema.schema"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
            "response_format.json_schema.schema",
        ),
        ({"response_format": {"type": "json_object", "schema": "{}"}}, "response_format.schema"),
        ({"json_schema": "object"}, "json_schema"),
        ({"json_schema": SCHEMA, "grammar": 'root ::= "a"'}, "grammar"),
    ],
)
def test_forms_llama_server_would_drop_are_400(stack: Stack, fields: dict[str, Any], param: str) -> None:
    stack.recorder.clear()
    r = chat(stack, **fields)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    assert stack.recorder.requests == []


@pytest.mark.parametrize(
    "schema",
    [{"type": "foo"}, {"$ref": "http://example.com/schema.json"}],
    ids=["unknown-type", "remote-ref"],
)
def test_schema_llama_server_cannot_use_is_400_naming_it(stack: Stack, schema: dict[str, Any]) -> None:
    """llama-server answers 500 for these; the client gets a 400 naming the schema field, not a 502."""
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    r = chat(stack, response_format=rf)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "response_format.json_schema.schema" and error["code"] == "invalid_schema"
    r = completion(stack, json_schema=schema)  # llama-server's own 400 here names the field in its message
    assert r.status_code == 400 and "json_schema" in r.json()["error"]["message"]


STRING_AND_INTEGER = {"allOf": [{"type": "string"}, {"type": "integer"}]}  # no value is both
OBJECT_OF_IT = {"type": "object", "properties": {"n": STRING_AND_INTEGER}, "required": ["n"]}


@pytest.mark.parametrize(
    ("path", "fields", "param"),
    [
        ("/v1/chat/completions",
         {"messages": MESSAGES, "tools": [{"type": "function", "function": {"name": "f", "parameters": OBJECT_OF_IT}}]},
         "tools[0].function.parameters.properties.n.allOf[1]"),
        ("/v1/chat/completions",
         {"messages": MESSAGES, "response_format": {"type": "json_schema", "json_schema": {
             "name": "x", "schema": STRING_AND_INTEGER}}},
         "response_format.json_schema.schema.allOf[1]"),
        ("/v1/responses",
         {"input": "Answer.", "tools": [{"type": "function", "name": "f", "parameters": STRING_AND_INTEGER}]},
         "tools[0].parameters.allOf[1]"),
    ],
    ids=["chat-tool", "chat-response_format", "responses-tool"],
)  # fmt: skip
def test_an_allof_of_string_and_integer_is_a_400_naming_the_path(
    stack: Stack, path: str, fields: dict[str, Any], param: str
) -> None:
    """llama-server ran these (200, the schema ignored); no value can be a string and an integer."""
    stack.recorder.clear()
    r = httpx.post(stack.url + path, json={"model": "demo", "max_tokens": 8, **fields}, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["param"], error["code"], error["type"]) == (param, "invalid_schema", "invalid_request_error"), error
    assert param in error["message"]
    assert stack.recorder.requests == []


def test_completions_refuse_two_schemas(stack: Stack) -> None:
    r = completion(stack, json_schema=SCHEMA, response_format={"type": "json_object"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format"


def test_anthropic_output_format_is_refused(stack: Stack) -> None:
    body = {
        "model": "demo",
        "max_tokens": 8,
        "messages": MESSAGES,
        "output_format": {"type": "json_schema", "schema": SCHEMA},
    }
    r = httpx.post(stack.url + "/v1/messages", json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert "output_format" in r.json()["error"]["message"]
