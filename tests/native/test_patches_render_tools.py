"""Patch 0010 (native/patches/0010-render-tools-apart-from-offered-tools.patch): a request's
``render_tools`` are the tools its prompt shows, while ``tools`` alone build the tool-call grammar
and the answer's parser. With it a conversation's tool change is told where it happened and the
prompt's top (its tools block) stays as the first turn rendered it.

The prompt is read back from ``/apply-template`` and ``count_tokens``; that only ``tools`` build the
grammar, from a tool schema the grammar builder refuses, offered or only shown.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from native_server import running_server

from orchestrator.models.tiny import write_tiny_model

pytestmark = [pytest.mark.native, pytest.mark.slow]

EMPTY: dict[str, Any] = {"type": "object", "properties": {}}
GET_X = {"type": "function", "function": {"name": "get_x", "description": "X", "parameters": EMPTY}}
GET_Y = {"type": "function", "function": {"name": "get_y", "description": "Y", "parameters": EMPTY}}
MESSAGES = [{"role": "user", "content": "U1"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    model = write_tiny_model(tmp_path_factory.mktemp("render-tools") / "tiny.gguf", mode="echo", q=0.0, seed=0)
    with running_server(model, "-np", "1") as url, httpx.Client(base_url=url, timeout=60.0) as client:
        yield client


def prompt(client: httpx.Client, **body: Any) -> str:
    resp = client.post("/apply-template", json={"messages": MESSAGES, **body})
    assert resp.status_code == 200, resp.text
    return str(resp.json()["prompt"])


def test_the_prompt_shows_render_tools(server: httpx.Client) -> None:
    both = prompt(server, tools=[GET_X, GET_Y])
    assert "get_x" in both and "get_y" in both
    assert prompt(server, tools=[GET_Y], render_tools=[GET_X, GET_Y]) == both
    assert prompt(server, tools=[], render_tools=[GET_X, GET_Y]) == both  # none offered, still shown
    assert "get_x" not in prompt(server, tools=[GET_Y])  # without it: as before


def test_only_the_offered_tools_build_the_grammar(server: httpx.Client) -> None:
    """A tool whose schema the grammar builder refuses (a ``$ref`` to nothing) fails the request
    when it is offered, and not when it is only shown: ``tools`` alone build the grammar and the
    parser, ``render_tools`` only the prompt (where its schema is plain text)."""
    broken = {"type": "object", "properties": {"pet": {"$ref": "#/components/schemas/Pet"}}, "required": ["pet"]}
    bad = {"type": "function", "function": {"name": "pets", "description": "P", "parameters": broken}}
    body = {"messages": MESSAGES, "max_tokens": 2, "chat_template_kwargs": {"enable_thinking": False}}
    offered = server.post("/v1/chat/completions", json={**body, "tools": [GET_Y, bad]})
    assert offered.status_code >= 400 and "components" in offered.text, offered.text
    shown = server.post("/v1/chat/completions", json={**body, "tools": [GET_Y], "render_tools": [GET_Y, bad]})
    assert shown.status_code == 200, shown.text
    assert "#/components/schemas/Pet" in prompt(server, tools=[GET_Y], render_tools=[GET_Y, bad])


def test_anthropic_count_tokens_counts_the_shown_prompt(server: httpx.Client) -> None:
    anthropic_tools = [{"name": "get_x", "description": "X", "input_schema": EMPTY}]
    body = {"model": "tiny", "messages": MESSAGES}
    shown = server.post("/v1/messages/count_tokens", json={**body, "tools": anthropic_tools}).json()
    moved = server.post("/v1/messages/count_tokens", json={**body, "tools": [], "render_tools": [GET_X]}).json()
    assert moved["input_tokens"] == shown["input_tokens"]


def test_render_tools_that_is_not_a_list_is_refused(server: httpx.Client) -> None:
    resp = server.post("/apply-template", json={"messages": MESSAGES, "render_tools": {"a": 1}})
    assert resp.status_code in (400, 500) and "render_tools" in resp.text
