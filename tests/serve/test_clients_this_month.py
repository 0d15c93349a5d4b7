"""What the clients send this month (issue 36), through the endpoint to a real llama-server on the
tiny echo model, with the clients' own bodies: Claude Code's mid-conversation tool changes (B68),
``thinking.display: "omitted"`` (B77), parallel tool results sent back out of order (B78), a tool
schema the grammar cannot use (B38) and a streamed prefill with ``reasoning_format: "none"`` (B37).

The recording tap shows the body that reached llama-server; ``usage`` shows how much of each
prompt was processed anew (``input_tokens``) and how much came from the slot's cache.
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

HEADERS = {
    "anthropic-version": "2023-06-01",
    "anthropic-beta": "mid-conversation-tool-changes-2026-07-01",
    "x-claude-code-session-id": "b68-session",
}
EMPTY: dict[str, Any] = {"type": "object", "properties": {}}
GET_X = {"name": "get_x", "description": "X", "input_schema": EMPTY}
GET_Y = {"name": "get_y", "description": "Y", "input_schema": EMPTY, "defer_loading": True}
GET_Z = {"name": "get_z", "description": "Z", "input_schema": EMPTY}  # no arguments: a forced call is short
OFF = {"type": "disabled"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    models = [{"name": "demo", "parallel": 2, "ctx_size": 8192, "threads": 1}]
    s = real_stack(tmp_path_factory.mktemp("this-month"), echo_model, bin_info, models=models)
    yield s
    s.close()


@pytest.fixture
def rec(stack: Stack) -> Any:
    stack.recorder.clear()
    return stack.recorder


def post(stack: Stack, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(stack.url + path, json=body, headers=headers or HEADERS, timeout=120)


def events(stack: Stack, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> list[Any]:
    """The ``data:`` payloads of a streamed answer (status 200 asserted)."""
    out = []
    with httpx.stream(
        "POST", stack.url + path, json={**body, "stream": True}, headers=headers or HEADERS, timeout=120
    ) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: {"):
                out.append(json.loads(line[6:]))
    return out


def change(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "system", "content": list(blocks)}


def ref(kind: str, name: str) -> dict[str, Any]:
    return {"type": kind, "tool": {"type": "tool_reference", "name": name}}


# --- B68: Claude Code's mid-conversation tool changes ------------------------------------------


class Session:
    """One Claude Code conversation: each turn's answer goes back into the history, as it would."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.messages: list[dict[str, Any]] = []
        self.usage: list[dict[str, int]] = []

    def turn(self, *new: dict[str, Any], **extra: Any) -> dict[str, Any]:
        self.messages.extend(new)
        body = {"model": "demo", "max_tokens": 8, "thinking": OFF, "tools": [GET_X, GET_Y], **extra}
        r = post(self.stack, "/v1/messages", {**body, "messages": self.messages})
        assert r.status_code == 200, r.text
        answer = r.json()
        self.usage.append(answer["usage"])
        self.messages.append({"role": "assistant", "content": answer["content"]})
        return dict(answer)

    def only_new_tokens(self) -> None:
        """The last turn processed only what the turn before did not (its answer, the change, the
        new user turn) + 64 tokens: the prompt of turn N+1 starts with the prompt of turn N."""
        before, now = self.usage[-2], self.usage[-1]
        seen = before["input_tokens"] + before["cache_read_input_tokens"] + before["output_tokens"]
        total = now["input_tokens"] + now["cache_read_input_tokens"]
        assert now["input_tokens"] <= max(0, total - seen) + 64, self.usage


def test_b68_a_session_with_tool_changes_keeps_its_cache_and_its_tools(stack: Stack, rec: Any) -> None:
    """A whole session: a deferred tool added by reference, a tool removed and one added by its
    definition (with cache_control), each a 200 (a 400 on main); the turn after each change
    processes only the change and the new turn; the added tool is offered (a ``tool_choice`` may name
    it, and it is among the tools that build the grammar and the parser), the removed one is not (a
    ``tool_choice`` naming it is a 400); the prompt's tools block stays the first turn's."""
    s = Session(stack)
    s.turn({"role": "user", "content": "U1"})
    s.turn({"role": "user", "content": "U2"}, change(ref("tool_addition", "get_y")))
    s.only_new_tokens()
    definition = {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": GET_Z}}
    s.turn(
        {"role": "user", "content": "U3"},
        change(ref("tool_removal", "get_x"), {**definition, "cache_control": {"type": "ephemeral"}}),
    )
    s.only_new_tokens()
    sent = rec.bodies("/v1/messages")[-1]
    assert [t["name"] for t in sent["tools"]] == ["get_y", "get_z"]  # offered now: what the answer may call
    assert [t["function"]["name"] for t in sent["render_tools"]] == ["get_x", "get_y"]  # the prompt's top, as on turn 1
    reminders = json.dumps(sent["messages"])
    assert "get_x has been removed" in reminders and "get_z is now available. Its definition" in reminders
    s.turn({"role": "user", "content": "U4"}, tool_choice={"type": "tool", "name": "get_z"})
    s.only_new_tokens()
    sent = rec.bodies("/v1/messages")[-1]  # the added tool can be named: it alone builds the grammar
    assert [t["name"] for t in sent["tools"]] == ["get_z"] and len(sent["render_tools"]) == 2
    named = {"type": "tool", "name": "get_x"}
    removed = post(stack, "/v1/messages", {"model": "demo", "max_tokens": 8, "tools": [GET_X, GET_Y],
                                           "messages": [*s.messages, {"role": "user", "content": "U5"}],
                                           "tool_choice": named})  # fmt: skip
    assert removed.status_code == 400 and "get_x" in removed.json()["error"]["message"]


@pytest.mark.parametrize(
    "messages",
    [
        [change(ref("tool_addition", "get_y"))],
        [change(ref("tool_removal", "get_x"))],
        [
            change(
                ref("tool_removal", "get_x"), {**ref("tool_addition", "get_y"), "cache_control": {"type": "ephemeral"}}
            )
        ],
        [
            change(ref("tool_addition", "get_y")),
            {"role": "assistant", "content": "A2"},
            {"role": "user", "content": "U3"},
        ],
    ],
    ids=["addition", "removal", "both", "replayed"],
)
def test_b68_case_variants_are_served_on_every_route(stack: Stack, messages: list[dict[str, Any]]) -> None:
    """The case's bodies: 200 on /v1/messages, streamed and on count_tokens (400 on main)."""
    opening = [
        {"role": "user", "content": "U1"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "U2"},
    ]
    body = {"model": "demo", "max_tokens": 16, "tools": [GET_X, GET_Y], "messages": opening + messages}
    r = post(stack, "/v1/messages", body)
    assert r.status_code == 200, r.text
    assert events(stack, "/v1/messages", body)[-1]["type"] == "message_stop"
    counted = post(stack, "/v1/messages/count_tokens", {k: v for k, v in body.items() if k != "max_tokens"})
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 0, counted.text


# --- B77: thinking.display "omitted" ----------------------------------------------------------

HISTORY = [
    {"role": "user", "content": "U1"},
    {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": "", "signature": "SIG1"}, {"type": "text", "text": "A1"}],
    },
    {"role": "user", "content": "U2"},
]


def test_b77_omitted_thinking_comes_back_without_its_text(stack: Stack) -> None:
    """``display: omitted``: the thinking block is there, with its signature, without its text, whole
    and streamed; ``summarized`` and no display keep the text (main: the text every time)."""
    base = {"model": "demo", "max_tokens": 16, "messages": HISTORY}
    omitted = {"type": "adaptive", "display": "omitted", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    whole = post(stack, "/v1/messages", {**base, "thinking": omitted}).json()
    [block] = [b for b in whole["content"] if b["type"] == "thinking"]
    assert block["thinking"] == "" and "signature" in block
    shown = post(stack, "/v1/messages", {**base, "thinking": {"type": "adaptive", "display": "summarized"}}).json()
    assert next(b for b in shown["content"] if b["type"] == "thinking")["thinking"]
    streamed = events(stack, "/v1/messages", {**base, "thinking": omitted})
    kinds = [e["delta"]["type"] for e in streamed if e["type"] == "content_block_delta"]
    text = "".join(e["delta"].get("thinking", "") for e in streamed if e["type"] == "content_block_delta")
    assert "signature_delta" in kinds and text == ""


def test_b77_empty_thinking_with_a_signature_renders_like_the_control(stack: Stack) -> None:
    control = [HISTORY[0], {"role": "assistant", "content": [{"type": "text", "text": "A1"}]}, HISTORY[2]]
    counts = []
    for messages in (HISTORY, control):
        r = post(
            stack,
            "/v1/messages/count_tokens",
            {"model": "demo", "messages": messages, "thinking": {"type": "adaptive"}},
        )
        assert r.status_code == 200, r.text
        counts.append(r.json()["input_tokens"])
    assert counts[0] == counts[1]


# --- B78: parallel tool results sent back out of order ----------------------------------------

B78_CHAT = {
    "model": "demo",
    "max_tokens": 8,
    "tools": [{"type": "function", "function": {"name": "get_x", "parameters": EMPTY}}],
    "messages": [
        {"role": "user", "content": "U1"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_x", "arguments": "{}"}},
            {"id": "call_2", "type": "function", "function": {"name": "get_x", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "call_2", "content": "R2"},
        {"role": "tool", "tool_call_id": "call_1", "content": "R1"},
        {"role": "user", "content": "U2"},
    ],
}  # fmt: skip
B78_MESSAGES = {
    "model": "demo",
    "max_tokens": 8,
    "tools": [{"name": "get_x", "input_schema": EMPTY}],
    "messages": [
        {"role": "user", "content": "U1"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "get_x", "input": {}},
            {"type": "tool_use", "id": "toolu_2", "name": "get_x", "input": {}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "R2"},
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "R1"},
        ]},
        {"role": "user", "content": "U2"},
    ],
}  # fmt: skip
B78_RESPONSES = {
    "model": "demo",
    "max_output_tokens": 8,
    "tools": [{"type": "function", "name": "get_x", "parameters": EMPTY}],
    "input": [
        {"role": "user", "content": "U1"},
        {"type": "function_call", "call_id": "call_1", "name": "get_x", "arguments": "{}"},
        {"type": "function_call", "call_id": "call_2", "name": "get_x", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_2", "output": "R2"},
        {"type": "function_call_output", "call_id": "call_1", "output": "R1"},
        {"role": "user", "content": "U2"},
    ],
}


def repairs(stack: Stack) -> float:
    for line in httpx.get(stack.url + "/metrics").text.splitlines():
        if line.startswith("orchestrator_repairs_total{") and 'kind="tool_results_ordered"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize(
    ("path", "body"),
    [("/v1/chat/completions", B78_CHAT), ("/v1/messages", B78_MESSAGES), ("/v1/responses", B78_RESPONSES)],
    ids=["chat", "messages", "responses"],
)
def test_b78_results_reach_the_template_in_call_order(stack: Stack, rec: Any, path: str, body: dict[str, Any]) -> None:
    """Results sent R2, R1 for calls 1, 2 are rendered R1 then R2 (main: R2 first), counted as a repair."""
    before = repairs(stack)
    r = post(stack, path, body, {"anthropic-version": "2023-06-01"})
    assert r.status_code == 200, r.text
    sent = json.dumps(rec.bodies(path)[-1])
    assert sent.index('"R1"') < sent.index('"R2"')
    assert repairs(stack) == before + 1
    if path == "/v1/chat/completions":  # the prompt itself, as the endpoint renders a chat
        rendered = post(stack, "/apply-template", {k: v for k, v in body.items() if k != "max_tokens"}, {})
        assert rendered.status_code == 200, rendered.text
        prompt = rendered.json()["prompt"]
        assert prompt.index("R1") < prompt.index("R2")


# --- B38: a tool schema the grammar compiler cannot use ---------------------------------------

GOOD = {
    "type": "function",
    "function": {
        "name": "get_x",
        "description": "d",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["A", "B"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
BAD_SCHEMAS = {
    "components_ref": {
        "type": "object",
        "properties": {"pet": {"$ref": "#/components/schemas/Pet"}},
        "required": ["pet"],
    },
    "unknown_type_file": {"type": "object", "properties": {"f": {"type": "file"}}},
    "remote_ref": {"type": "object", "properties": {"f": {"$ref": "https://example.com/s.json"}}},
    "minItems_3000": {
        "type": "object",
        "properties": {"q": {"type": "array", "minItems": 3000, "items": {"type": "integer"}}},
        "required": ["q"],
    },
}


def bad_tool(label: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": f"t_{label}", "description": "d", "parameters": BAD_SCHEMAS[label]},
    }


@pytest.mark.parametrize("label", sorted(BAD_SCHEMAS))
def test_b38_an_unusable_tool_schema_names_its_tool(stack: Stack, label: str) -> None:
    """A 400 naming ``tools[1]`` (main: param ``tools`` or null), on chat, streamed chat, Messages
    and Responses; never a 5xx."""
    messages = [{"role": "user", "content": "U1"}]
    chat = {"model": "demo", "max_tokens": 4, "messages": messages, "tools": [GOOD, bad_tool(label)]}
    for stream in (False, True):
        r = post(stack, "/v1/chat/completions", {**chat, "stream": stream}, {})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"].startswith("tools[1]"), r.text
    fn = [t["function"] for t in (GOOD, bad_tool(label))]
    anthropic_tools = [
        {"name": f["name"], "description": f["description"], "input_schema": f["parameters"]} for f in fn
    ]
    r = post(stack, "/v1/messages", {"model": "demo", "max_tokens": 4, "messages": messages, "tools": anthropic_tools})
    assert r.status_code == 400 and "tools[1]" in r.json()["error"]["message"], r.text
    responses_tools = [{"type": "function", **f} for f in fn]
    r = post(
        stack, "/v1/responses", {"model": "demo", "max_output_tokens": 16, "input": "U1", "tools": responses_tools}, {}
    )
    assert r.status_code == 400 and r.json()["error"]["param"].startswith("tools[1]"), r.text


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"query": {"type": "string", "maxLength": 10000}}, "required": ["query"]},
        {"type": "object", "properties": {"urls": {"type": "array", "maxItems": 10000, "items": {"type": "string"}}}},
        {"type": "object", "properties": {"to": {"type": "string", "pattern": "^(?!\\.)[^@]+@[^@]+$"}}},
        {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
         "properties": {"a": {"type": "string", "format": "uri"}}, "additionalProperties": {}},
    ],
    ids=["maxLength_10000", "maxItems_10000", "lookahead_pattern", "schema_meta_format"],
)  # fmt: skip
def test_b38_controls_are_served(stack: Stack, schema: dict[str, Any]) -> None:
    tool = {"type": "function", "function": {"name": "t", "description": "d", "parameters": schema}}
    body = {"model": "demo", "max_tokens": 4, "messages": [{"role": "user", "content": "U1"}], "tools": [GOOD, tool]}
    r = post(stack, "/v1/chat/completions", body, {})
    assert r.status_code == 200, r.text


# --- B37: a streamed prefill with reasoning_format "none" -------------------------------------


def test_b37_streamed_prefill_continuation_is_content_with_reasoning_format_none(stack: Stack) -> None:
    """Thinking on, the last message the assistant's: the continuation is content, streamed or not,
    with the server's reasoning split or without it (main: a stream with ``none`` put it in
    ``reasoning_content``)."""
    messages = [{"role": "user", "content": "U1"}, {"role": "assistant", "content": "A1 prefix"}]
    body = {"model": "demo", "messages": messages, "max_tokens": 8, "temperature": 0}
    body["chat_template_kwargs"] = {"enable_thinking": True}
    whole = post(stack, "/v1/chat/completions", {**body, "reasoning_format": "none"}, {}).json()
    expected = whole["choices"][0]["message"]["content"]
    assert expected and not whole["choices"][0]["message"].get("reasoning_content")
    for fmt in ("none", "auto"):
        chunks = events(stack, "/v1/chat/completions", {**body, "reasoning_format": fmt}, {})
        deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
        assert "".join(d.get("content") or "" for d in deltas) == expected, (fmt, deltas)
        assert not "".join(d.get("reasoning_content") or "" for d in deltas), (fmt, deltas)


# --- item 10: every content-block type Claude Code can send -----------------------------------

SURFACE = Path(__file__).resolve().parents[1] / "data" / "client_surface" / "claude-code.json"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "apis.md"
USE = {"type": "tool_use", "id": "toolu_1", "name": "get_x", "input": {}}
SEARCH = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "tool_search_tool_regex", "input": {"pattern": "x"}}
REFERENCES = {
    "type": "tool_search_tool_search_result",
    "tool_references": [{"type": "tool_reference", "tool_name": "get_x"}],
}
FOUND = {"type": "tool_search_tool_result", "tool_use_id": "srvtoolu_1", "content": REFERENCES}


def result(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": content}]}


def assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


# the types the endpoint serves, each in a conversation as Claude Code sends it
SERVED: dict[str, list[dict[str, Any]]] = {
    "text": [{"role": "user", "content": [text("U")]}],
    "thinking": [assistant({"type": "thinking", "thinking": "T", "signature": "S"}, text("A"))],
    "redacted_thinking": [assistant({"type": "redacted_thinking", "data": "D"}, text("A"))],
    "tool_use": [assistant(USE), result("R")],
    "tool_result": [assistant(USE), result([text("R")])],
    "tool_reference": [assistant(USE), result([{"type": "tool_reference", "tool_name": "get_x"}])],
    "server_tool_use": [assistant(SEARCH, FOUND)],
    "tool_search_tool_result": [assistant(SEARCH, FOUND)],
    "tool_addition": [change(ref("tool_addition", "get_x"))],
    "tool_removal": [change(ref("tool_removal", "get_x"))],
}
# refused by design (docs/apis.md says why): a 400 naming the block, never a 5xx
REFUSED = {
    "image": "user",  # this model has no vision projector (a model with one takes it)
    "document": "user",
    "search_result": "user",
    "container_upload": "user",
    "mcp_tool_use": "assistant",
    "mcp_tool_result": "user",
    "mcp_tool_listing": "assistant",
    "web_search_tool_result": "assistant",
    "web_fetch_tool_result": "assistant",
    "code_execution_tool_result": "assistant",
    "bash_code_execution_tool_result": "assistant",
    "text_editor_code_execution_tool_result": "assistant",
    "advisor_tool_result": "assistant",
    "compaction": "assistant",
    "connector_text": "assistant",
    "fallback": "assistant",
    "mid_conv_system": "assistant",
}


def test_item10_every_claude_code_block_type_is_served_or_refused_by_design(stack: Stack) -> None:
    """One block of each type in Claude Code's own table (``scripts/client_surface.py`` reads it
    from the installed bundle): the served ones count, the others are a 400 naming the block, each
    listed in docs/apis.md with its reason. A type a new version adds fails here until it is one
    or the other."""
    surface = json.loads(SURFACE.read_text())
    assert set(surface["content_block_types"]) == set(SERVED) | set(REFUSED), "a new block type: serve or refuse it"
    docs = DOCS.read_text()
    opening = [{"role": "user", "content": "U1"}]
    tools = [GET_X, {**GET_Y, "name": "get_w"}]
    for btype, turns in SERVED.items():
        body = {"model": "demo", "tools": tools, "messages": [*opening, *turns, {"role": "user", "content": "U2"}]}
        r = post(stack, "/v1/messages/count_tokens", body)
        assert r.status_code == 200, (btype, r.text)
    for btype, role in REFUSED.items():
        block = {"type": btype, "tool_use_id": "srvtoolu_1", "content": []}
        body = {
            "model": "demo",
            "messages": [*opening, {"role": role, "content": [block]}, {"role": "user", "content": "U2"}],
        }
        r = post(stack, "/v1/messages/count_tokens", body)
        assert r.status_code == 400 and btype in r.json()["error"]["message"], (btype, r.text)
        assert f"`{btype}`" in docs, f"docs/apis.md does not say why {btype} is refused"


# --- B56: side requests and a second conversation at parallel 2 ---------------------------------

LONG_SYSTEM = "S0 P " + " ".join(f"Rule {i}: answer in the project's own words." for i in range(80))


def test_b56_a_side_request_of_the_session_takes_the_other_slot(stack: Stack, rec: Any) -> None:
    """Claude Code's title request carries the main conversation's session header and
    ``metadata.user_id`` but another (short) system prompt. At parallel 2 it lands on the slot the
    main conversation does not hold (on main it was left to llama-server, which took the main
    conversation's slot); the main conversation's turn 2 goes back to its slot and reads at least
    90 % of turn 1's prompt from it."""
    headers = {**HEADERS, "x-claude-code-session-id": "b56-session"}
    meta = {"user_id": json.dumps({"session_id": "b56-session"})}
    first = [{"role": "user", "content": "U1"}]
    body = {"model": "demo", "max_tokens": 16, "thinking": OFF, "system": LONG_SYSTEM, "metadata": meta}
    turn1 = post(stack, "/v1/messages", {**body, "messages": first}, headers)
    assert turn1.status_code == 200, turn1.text
    main_slot = rec.bodies("/v1/messages")[-1]["id_slot"]
    side_body = {"model": "demo", "max_tokens": 8, "thinking": OFF, "system": "S1 title generator", "metadata": meta}
    side = post(stack, "/v1/messages", {**side_body, "messages": first}, headers)
    assert side.status_code == 200, side.text
    assert rec.bodies("/v1/messages")[-1].get("id_slot") == 1 - main_slot
    answer = {"role": "assistant", "content": turn1.json()["content"]}
    turn2 = post(
        stack, "/v1/messages", {**body, "messages": [*first, answer, {"role": "user", "content": "U2"}]}, headers
    )
    assert turn2.status_code == 200, turn2.text
    assert rec.bodies("/v1/messages")[-1]["id_slot"] == main_slot
    usage1, usage2 = turn1.json()["usage"], turn2.json()["usage"]
    prompt1 = usage1["input_tokens"] + usage1["cache_read_input_tokens"]
    assert usage2["cache_read_input_tokens"] >= 0.9 * prompt1, (usage1, usage2)


def test_b56_two_conversations_on_one_system_prompt_alternate_without_losing_their_history(stack: Stack) -> None:
    """Conversations X and Y share the system prompt and differ from their first user turn, sent
    X1, Y1, X2, Y2, X3, Y3 on chat completions: X3 and Y3 each read at least 90 % of their own
    previous prompt from the cache (not only the shared system prompt)."""
    system = {"role": "system", "content": LONG_SYSTEM}
    history = {
        "X": [system, {"role": "user", "content": "X opens"}],
        "Y": [system, {"role": "user", "content": "Y opens"}],
    }
    prompts: dict[str, list[int]] = {"X": [], "Y": []}
    cached: dict[str, list[int]] = {"X": [], "Y": []}
    for turn in range(3):
        for name, messages in history.items():
            r = post(stack, "/v1/chat/completions", {"model": "demo", "max_tokens": 8, "messages": messages}, {})
            assert r.status_code == 200, r.text
            usage = r.json()["usage"]
            prompts[name].append(usage["prompt_tokens"])
            cached[name].append(usage["prompt_tokens_details"]["cached_tokens"])
            reply = r.json()["choices"][0]["message"]["content"]
            messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": f"{name}{turn + 2}"}]
    for name in history:
        assert cached[name][2] >= 0.9 * prompts[name][1], (name, prompts, cached)


# --- item 10: every item and part type Codex can send ------------------------------------------

CODEX = Path(__file__).resolve().parents[1] / "data" / "client_surface" / "codex.json"
FN_X = {"type": "function", "name": "get_x", "description": "X", "parameters": EMPTY}
FN_W = {"type": "function", "name": "get_w", "description": "W", "parameters": EMPTY}
CALL = {"type": "function_call", "call_id": "call_1", "name": "get_x", "arguments": "{}"}
CUSTOM = {"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch", "input": "*** Begin Patch"}
PNG = (
    "data:image/png;base64,"
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)

# one item of each type, in the conversation where Codex replays it
CODEX_ITEMS: dict[str, list[dict[str, Any]]] = {
    "message": [{"type": "message", "role": "assistant", "phase": "final_answer",
                 "content": [{"type": "output_text", "text": "A1", "annotations": []}]}],
    "reasoning": [{"type": "reasoning", "summary": [{"type": "summary_text", "text": "S"}],
                   "content": [{"type": "reasoning_text", "text": "T"}, {"type": "text", "text": "T2"}],
                   "encrypted_content": None}],
    "function_call": [CALL, {"type": "function_call_output", "call_id": "call_1", "output": "R"}],
    "function_call_output": [CALL, {"type": "function_call_output", "call_id": "call_1",
                                    "output": [{"type": "input_text", "text": "R"},
                                               {"type": "encrypted_content", "encrypted_content": "gAAA"}]}],
    "custom_tool_call": [CUSTOM, {"type": "custom_tool_call_output", "call_id": "call_2", "output": "Done"}],
    "custom_tool_call_output": [CUSTOM, {"type": "custom_tool_call_output", "call_id": "call_2", "output": "Done"}],
    "additional_tools": [{"type": "additional_tools", "role": "developer", "tools": [FN_W]}],
    "agent_message": [{"type": "agent_message", "author": "/root/worker", "recipient": "/root",
                       "content": [{"type": "input_text", "text": "worker done"},
                                   {"type": "encrypted_content", "encrypted_content": "gAAA"}]}],
    "local_shell_call": [{"type": "local_shell_call", "call_id": "call_3", "status": "completed",
                          "action": {"type": "exec", "command": ["ls"]}}],
    "tool_search_call": [{"type": "tool_search_call", "call_id": "call_4", "execution": "client",
                          "arguments": {"query": "x"}}],
    "tool_search_output": [{"type": "tool_search_output", "call_id": "call_4", "execution": "client",
                            "status": "completed", "tools": [FN_W]}],
    "web_search_call": [{"type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "q"}}],
    "image_generation_call": [{"type": "image_generation_call", "status": "completed", "result": "aGk="}],
    "compaction": [{"type": "compaction", "encrypted_content": "gAAA-from-openai"}],
    "context_compaction": [{"type": "context_compaction", "encrypted_content": "gAAA-from-openai"}],
    "compaction_trigger": [{"type": "compaction_trigger"}],
    "configuration_update": [{"type": "configuration_update", "reasoning": {"effort": "high"}}],
    "other": [{"type": "other"}],
}  # fmt: skip
# part types refused by design on this model (docs/apis.md): it has no projector for media
CODEX_REFUSED_PARTS = {
    "input_image": {"type": "input_image", "image_url": PNG, "detail": "auto"},
    "input_audio": {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
}


def test_item10_every_codex_item_type_is_served_or_refused_by_design(stack: Stack) -> None:
    """One item of each type in Codex's own ``ResponseItem`` schema (``scripts/client_surface.py``
    writes it from the installed Codex), replayed in a conversation on ``/v1/responses/input_tokens``:
    each is a 200 (on main six of them were a 400: ``additional_tools``, ``agent_message``,
    ``configuration_update``, ``compaction_trigger``, ``context_compaction``, ``other``). Of the part
    types, text parts are read and ``encrypted_content`` dropped; media parts on a model without a
    projector are a 400 naming the part, listed in docs/apis.md. A type a new Codex adds fails here
    until it is one or the other."""
    surface = json.loads(CODEX.read_text())
    assert set(surface["response_item_types"]) == set(CODEX_ITEMS), "a new Codex item type: serve or refuse it"
    parts = {*surface["message_content_types"], *surface["tool_output_content_types"]}
    assert parts <= {"input_text", "output_text", "encrypted_content", *CODEX_REFUSED_PARTS}, parts
    assert set(surface["agent_message_content_types"]) <= {"input_text", "encrypted_content"}
    assert set(surface["reasoning_content_types"]) | set(surface["reasoning_summary_types"]) <= {
        "reasoning_text", "text", "summary_text"}  # fmt: skip
    opening = [{"role": "user", "content": "U1"}]
    for itype, items in CODEX_ITEMS.items():
        body = {"model": "demo", "tools": [FN_X], "input": [*opening, *items, {"role": "user", "content": "U2"}]}
        r = post(stack, "/v1/responses/input_tokens", body, {})
        assert r.status_code == 200 and r.json()["input_tokens"] > 0, (itype, r.text)
    docs = DOCS.read_text()
    for ptype, part in CODEX_REFUSED_PARTS.items():
        for where in ("message", "tool output"):
            if where == "message":
                items = [{"type": "message", "role": "user", "content": [part]}]
            else:
                items = [CALL, {"type": "function_call_output", "call_id": "call_1", "output": [part]}]
            body = {"model": "demo", "tools": [FN_X], "input": [*opening, *items, {"role": "user", "content": "U2"}]}
            r = post(stack, "/v1/responses", {**body, "max_output_tokens": 4}, {})
            assert r.status_code == 400 and r.json()["error"]["message"], (ptype, where, r.text)
        assert f"`{ptype}`" in docs, f"docs/apis.md does not say why {ptype} is refused"


def test_item10_codex_additional_tools_keep_the_cache_and_offer_the_tool(stack: Stack, rec: Any) -> None:
    """A Codex session that adds a tool mid-conversation (``additional_tools``, a 400 on main): the
    turn after the change processes only the change and the new turn (+ 64 tokens), the prompt's
    tools block stays the first turn's (``render_tools``), and a ``tool_choice`` may name the added
    tool (it alone then builds the grammar)."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "U1"}]
    usage: list[dict[str, Any]] = []

    def turn(*new: dict[str, Any], **extra: Any) -> dict[str, Any]:
        history.extend(new)
        body = {"model": "demo", "tools": [FN_X], "max_output_tokens": 8, "reasoning": {"effort": "none"}, **extra}
        r = post(stack, "/v1/responses", {**body, "input": history}, {})
        assert r.status_code == 200, r.text
        answer = r.json()
        usage.append(answer["usage"])
        history.extend(answer["output"])
        return dict(answer)

    def only_new_tokens() -> None:
        before, now = usage[-2], usage[-1]
        seen = before["input_tokens"] + before["output_tokens"]
        cached = now["input_tokens_details"]["cached_tokens"]
        slots = [b.get("id_slot") for b in rec.bodies("/v1/responses")]
        assert now["input_tokens"] - cached <= max(0, now["input_tokens"] - seen) + 64, (usage, slots)

    turn()
    turn({"type": "additional_tools", "role": "developer", "tools": [FN_W]}, {"role": "user", "content": "U2"})
    only_new_tokens()
    sent = rec.bodies("/v1/responses")[-1]
    assert [t["name"] for t in sent["tools"]] == ["get_x", "get_w"]
    assert [t["function"]["name"] for t in sent["render_tools"]] == ["get_x"]
    assert "get_w is now available" in json.dumps(sent["input"])
    turn({"role": "user", "content": "U3"}, tool_choice={"type": "function", "name": "get_w"})
    only_new_tokens()  # a tool_choice may name the added tool (a 400 for a tool not in tools)
    sent = rec.bodies("/v1/responses")[-1]
    assert [t["name"] for t in sent["tools"]] == ["get_w"] and sent["tool_choice"] == "required"
