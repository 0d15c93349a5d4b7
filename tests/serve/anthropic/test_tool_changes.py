"""Claude Code's mid-conversation tool changes (B68), repaired on literals: the change becomes a
reminder where it happened, ``render_tools`` keeps the prompt's tools block, ``tools`` is what the
answer may call now (the live path is ``tests/serve/test_clients_this_month.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.errors import ApiError
from orchestrator.serve.anthropic import repair as anthropic
from orchestrator.serve.anthropic.tool_changes import oai_tool
from orchestrator.serve.repair.chat import RepairPolicy

EMPTY: dict[str, Any] = {"type": "object", "properties": {}}
GET_X = {"name": "get_x", "description": "X", "input_schema": EMPTY}
GET_Y = {"name": "get_y", "description": "Y", "input_schema": EMPTY, "defer_loading": True}
GET_Z = {
    "name": "get_z",
    "description": "Z",
    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
}
OPENING = [{"role": "user", "content": "U1"}, {"role": "assistant", "content": "A1"}, {"role": "user", "content": "U2"}]


def last_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    return content if isinstance(content, str) else content[-1]["text"]


def change(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "system", "content": list(blocks)}


def add_ref(name: str) -> dict[str, Any]:
    return {"type": "tool_addition", "tool": {"type": "tool_reference", "name": name}}


def remove(name: str) -> dict[str, Any]:
    return {"type": "tool_removal", "tool": {"type": "tool_reference", "name": name}}


def repaired(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body = {"model": "demo", "max_tokens": 16, "tools": tools or [GET_X, GET_Y], "messages": messages}
    result = anthropic.repair_request(body, RepairPolicy())
    assert "tool_change_rendered" in result.repairs
    return result.body


def test_removal_and_addition_rendered_in_place_and_offered_tools_follow() -> None:
    """B68: both blocks in one system turn (one with cache_control): the turn becomes a reminder in
    U2, get_x is no longer offered, get_y stays, and the prompt's tools block is the request's."""
    added = {**add_ref("get_y"), "cache_control": {"type": "ephemeral"}}
    body = repaired([*OPENING, change(remove("get_x"), added)])
    assert [t["name"] for t in body["tools"]] == ["get_y"]
    assert body["render_tools"] == [oai_tool(GET_X), oai_tool(GET_Y)]
    last = body["messages"][-1]
    assert last["role"] == "user" and len(body["messages"]) == 3
    text = last_text(body)
    assert (
        text.startswith("U2\n\n<system-reminder>")
        and "get_x has been removed" in text
        and "get_y is now available" in text
    )


def test_definition_addition_is_offered_and_shown_with_its_schema() -> None:
    body = repaired(
        [*OPENING, change({"type": "tool_addition", "tool": {"type": "tool_definition", "definition": GET_Z}})]
    )
    assert [t["name"] for t in body["tools"]] == ["get_x", "get_y", "get_z"]
    assert [t["function"]["name"] for t in body["render_tools"]] == ["get_x", "get_y"]
    text = last_text(body)
    assert '"name": "get_z"' in text and '"q": {"type": "string"}' in text


def test_replayed_change_renders_the_same_and_later_turns_only_grow() -> None:
    """The turn after the change renders the change the same way, then A2 and U3 after it."""
    turn = [*OPENING, change(add_ref("get_y"), remove("get_x"))]
    first = repaired(turn)
    second = repaired([*turn, {"role": "assistant", "content": "A2"}, {"role": "user", "content": "U3"}])
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assert second["render_tools"] == first["render_tools"] and second["tools"] == first["tools"]


def test_a_removed_tool_can_come_back() -> None:
    body = repaired([*OPENING, change(remove("get_x")), {"role": "user", "content": "U3"}, change(add_ref("get_x"))])
    assert [t["name"] for t in body["tools"]] == ["get_y", "get_x"]


def test_no_change_leaves_the_body_alone() -> None:
    body = {"model": "demo", "max_tokens": 16, "tools": [GET_X], "messages": OPENING}
    assert anthropic.repair_request(body, RepairPolicy()).body is body


def test_tool_choice_none_keeps_the_prompt_tools_and_offers_none() -> None:
    body = {"model": "demo", "max_tokens": 8, "tools": [GET_X, GET_Y], "tool_choice": {"type": "none"}}
    out = anthropic.repair_request({**body, "messages": [*OPENING, change(remove("get_x"))]}, RepairPolicy()).body
    assert out["tools"] == [] and len(out["render_tools"]) == 2 and "tool_choice" not in out


@pytest.mark.parametrize(
    ("block", "param"),
    [
        (add_ref("nope"), "messages[3].content[0].tool.name"),
        (remove("nope"), "messages[3].content[0].tool.name"),
        ({"type": "tool_removal", "tool": {"type": "tool_definition"}}, "messages[3].content[0].tool"),
        (
            {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": {"name": "q"}}},
            "messages[3].content[0].tool.definition.input_schema",
        ),
    ],
)
def test_a_change_naming_no_tool_is_a_400_naming_the_block(block: dict[str, Any], param: str) -> None:
    body = {"model": "demo", "max_tokens": 8, "tools": [GET_X], "messages": [*OPENING, change(block)]}
    with pytest.raises(ApiError) as err:
        anthropic.repair_request(body, RepairPolicy())
    assert err.value.status == 400 and err.value.param == param
