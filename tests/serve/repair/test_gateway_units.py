"""What agents send that the endpoint used to ignore or refuse, as functions on values: ``max`` as the
highest reasoning level, Ollama's ``think`` on /v1, unsatisfiable schemas, launcher name suffixes,
gateway model-list paging."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from orchestrator.config.schema import ModelConfig
from orchestrator.errors import ApiError
from orchestrator.serve.anthropic.repair import repair_request as repair_messages
from orchestrator.serve.anthropic.shapes import MESSAGES
from orchestrator.serve.http.body import parse_body
from orchestrator.serve.info import page
from orchestrator.serve.ollama.translate import chat_request as to_chat
from orchestrator.serve.registry import adapter_for
from orchestrator.serve.repair import structured
from orchestrator.serve.repair.chat import RepairPolicy, repair_request
from orchestrator.serve.responses.repair import repair_request as repair_responses
from orchestrator.serve.routing import _loosely

USER = [{"role": "user", "content": "Hi"}]


def test_max_is_the_highest_reasoning_level_everywhere() -> None:
    chat = repair_request({"messages": USER, "reasoning_effort": "max"}, RepairPolicy())
    assert chat.thinking is True
    responses = repair_responses({"input": "Hi", "reasoning": {"effort": "max"}}, RepairPolicy())
    assert responses.thinking is True
    ollama = to_chat({"model": "m", "messages": USER, "think": "max"})
    assert ollama["chat_template_kwargs"] == {"enable_thinking": True}


@pytest.mark.parametrize(("think", "on"), [(False, False), (True, True), ("high", True), ("max", True)])
def test_think_on_v1_is_honoured_not_ignored(think: Any, on: bool) -> None:
    result = repair_request({"messages": USER, "think": think}, RepairPolicy(thinking_default=not on))
    assert result.body["chat_template_kwargs"] == {"enable_thinking": on}
    assert "think" not in result.body and result.thinking is on and "thinking_moved" in result.repairs


def test_a_think_llama_server_would_ignore_is_a_400() -> None:
    with pytest.raises(ApiError) as err:
        repair_request({"messages": USER, "think": "ultra"}, RepairPolicy())
    assert err.value.status == 400 and err.value.param == "think"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"not": {}}}}},
         "response_format.json_schema.schema"),
        ({"json_schema": {"type": "object", "properties": {"a": {"enum": []}}, "required": ["a"]}},
         "json_schema.properties.a"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}},
                    {"type": "function", "function": {"name": "g", "parameters": {"allOf": [{"not": True}]}}}]},
         "tools[1].function.parameters.allOf[0]"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
            "allOf": [{"type": "string"}, {"type": "integer"}]}}}]},
         "tools[0].function.parameters.allOf[1]"),
        ({"json_schema": {"type": "string", "allOf": [{"type": ["integer", "null"]}]}}, "json_schema.allOf[0]"),
        ({"json_schema": {"allOf": [{"type": ["string", "integer"]}, {"allOf": [{"type": "integer"}]},
                                    {"type": "string"}]}}, "json_schema.allOf[2]"),
    ],
)  # fmt: skip
def test_a_schema_nothing_can_match_is_a_400_naming_where(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as err:
        structured.check({"messages": USER, **body})
    assert err.value.status == 400 and err.value.param == param and err.value.code == "invalid_schema"


def test_satisfiable_schemas_pass() -> None:
    optional = {"type": "object", "properties": {"a": {"not": {}}}}  # satisfied by leaving a out
    structured.check({"messages": USER, "json_schema": optional})
    structured.check({"messages": USER, "response_format": {"type": "json_object"}})
    number = {"allOf": [{"type": "number"}, {"type": ["integer", "string"]}, {"allOf": [{"minimum": 1}]}]}
    structured.check({"messages": USER, "json_schema": number})  # integer is a number: they meet
    structured.check({"messages": USER, "json_schema": {"allOf": [{"type": "string"}, {"type": "strange"}]}})


def test_launcher_suffixes_and_case_resolve_to_the_model() -> None:
    demo = ModelConfig(name="demo", path="/m.gguf")
    table = {"demo": demo, "Qwen": ModelConfig(name="Qwen", path="/q.gguf")}
    assert _loosely(table, "demo[1m]") is demo and _loosely(table, "DEMO") is demo
    assert _loosely(table, "Demo[1M]") is demo
    assert _loosely(table, "nope[1m]") is None
    ambiguous = {"a": demo, "A": ModelConfig(name="A", path="/x.gguf")}
    assert _loosely(ambiguous, "a[1m]") is demo  # the exact name first
    two = {"Ab": demo, "aB": ModelConfig(name="aB", path="/y.gguf")}
    assert _loosely(two, "ab") is None  # two models fold to it: no guess


def test_model_list_paging() -> None:
    entries = [{"id": f"m{i}"} for i in range(5)]
    assert page(entries, {}) == (entries, False)
    assert page(entries, {"limit": "2"}) == (entries[:2], True)
    assert page(entries, {"limit": "2", "after_id": "m2"}) == (entries[3:5], False)
    assert page(entries, {"limit": "1", "before_id": "m2"}) == (entries[1:2], True)
    assert page(entries, {"limit": "1000"}) == (entries, False)
    with pytest.raises(ApiError) as err:
        page(entries, {"limit": "0"})
    assert err.value.status == 400 and err.value.param == "limit"


def test_review_findings_on_client_input() -> None:
    """Inputs an adversarial review found: each is a clear 400 (or passes), never a 500 or a guess."""
    entries = [{"id": "m0"}]
    for bad in ("²", "9" * 4400, "-1"):
        with pytest.raises(ApiError) as err:
            page(entries, {"limit": bad})
        assert err.value.status == 400 and err.value.param == "limit"
    structured.check({"messages": USER, "json_schema": {"allOf": 5}})  # not a list: not ours to refuse
    structured.check(
        {"messages": USER, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"allOf": True}}}]}
    )
    for body in ({"think": False, "enable_thinking": True}, {"think": "bogus", "enable_thinking": True},
                 {"think": True, "reasoning_effort": "ultra"}):  # fmt: skip
        with pytest.raises(ApiError) as err:
            repair_request({"messages": USER, **body}, RepairPolicy())
        assert err.value.status == 400
    assert "think" not in repair_request({"messages": USER, "think": None}, RepairPolicy()).repairs  # null: absent


def test_a_bracketed_alias_beats_the_suffix_rule() -> None:
    qwen = ModelConfig(name="qwen", path="/a.gguf")
    q8 = ModelConfig(name="qwen-q8", path="/b.gguf", aliases=["qwen[q8]"])
    table = {"qwen": qwen, "qwen-q8": q8, "qwen[q8]": q8}
    assert _loosely(table, "QWEN[Q8]") is q8 and _loosely(table, "qwen[1m]") is qwen


def test_compaction_items_are_sealed_and_expanded_the_same_way_every_turn() -> None:
    from orchestrator.serve.responses.compaction import expand, seal

    item = {"type": "compaction", "id": "cmp_1", "encrypted_content": seal("we fixed the test")}
    out = repair_responses({"input": [item, {"role": "user", "content": "next"}]}, RepairPolicy()).body["input"]
    assert out[0] == expand(item) and "we fixed the test" in out[0]["content"] and out[0]["role"] == "user"
    foreign = {"type": "compaction", "encrypted_content": "gAAAAABpM0Yj"}  # another server's: unreadable
    out = repair_responses({"input": [foreign, {"role": "user", "content": "next"}]}, RepairPolicy()).body["input"]
    assert out == [{"role": "user", "content": "next"}]
    with pytest.raises(ApiError) as err:
        expand({"type": "compaction", "encrypted_content": seal("x")[:-4] + "!!!!"})
    assert err.value.status == 400


def test_tool_search_blocks_replayed_from_anthropic_become_text() -> None:
    """A conversation moved from Anthropic's API replays the search as ``server_tool_use`` and
    ``tool_search_tool_result`` blocks: the call is dropped, the result names the tools found."""
    found = [{"type": "tool_reference", "tool_name": "get_x"}]
    refs = {"type": "tool_search_tool_result_content", "tool_references": found}
    assistant = [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "tool_search_tool_regex", "input": {"pattern": "x"}},
        {"type": "tool_search_tool_result", "tool_use_id": "srvtoolu_1", "content": refs},
        {"type": "text", "text": "Found it."},
    ]
    body = {
        "model": "demo",
        "max_tokens": 8,
        "tools": [{"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}],
        "messages": [
            {"role": "user", "content": "Q"},
            {"role": "assistant", "content": assistant},
            {"role": "user", "content": "go"},
        ],
    }
    parse_body(json.dumps(body).encode(), MESSAGES)  # the block's object content passes the shape check
    result = repair_messages(body, RepairPolicy())
    assert {"tool_search_served", "tool_reference_text"} <= set(result.repairs)
    blocks = result.body["messages"][1]["content"]
    assert [b["type"] for b in blocks] == ["text", "text"] and "get_x" in blocks[0]["text"]
    assert "tools" not in result.body or result.body["tools"] == []


@pytest.mark.parametrize(
    ("path", "tools", "param"),
    [
        ("/v1/messages", [{"name": "a", "input_schema": {"type": "object"}},
                          {"name": "b", "input_schema": {"not": {}}}], "tools[1].input_schema"),
        ("/v1/responses", [{"type": "function", "name": "b", "parameters": {"type": "object", "properties": {
            "x": {"enum": []}}, "required": ["x"]}}], "tools[0].parameters.properties.x"),
        ("/v1/chat/completions", [{"type": "function", "function": {"name": "b", "parameters": False}}],
         "tools[0].function.parameters"),
        ("/v1/responses", [{"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "f",
            "parameters": {"not": {}}}]}], "tools[0].tools[0].parameters"),
    ],
)  # fmt: skip
def test_a_tool_schema_no_call_can_match_is_a_400_naming_its_path(
    path: str, tools: list[dict[str, Any]], param: str
) -> None:
    """llama-server drops what it cannot convert (``not``) and runs the tool unconstrained: a 200 whose
    calls can never be valid. Every API refuses it, naming the tool's index and the schema path."""
    body: dict[str, Any] = {"model": "demo", "max_tokens": 8, "tools": tools}
    body.update({"input": "hi"} if path == "/v1/responses" else {"messages": [{"role": "user", "content": "hi"}]})
    adapter = adapter_for(path)
    assert adapter is not None
    with pytest.raises(ApiError) as caught:
        adapter.route.prepare(body, ModelConfig(name="demo", path="/x.gguf"), RepairPolicy())
    assert caught.value.status == 400 and caught.value.param == param, caught.value


def _sse(kind: str, **fields: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n".encode()


def test_a_streamed_compaction_shows_only_the_compaction_item_and_ends_once_on_failure() -> None:
    from orchestrator.serve.responses.adapter import RESPONSES_SSE
    from orchestrator.serve.responses.compaction_stream import CompactionStream

    message = {"type": "message", "content": [{"type": "output_text", "text": "the summary"}]}
    upstream = [
        _sse("response.created", response={"id": "r"}),
        b": ping\n\n",
        _sse("response.output_item.added", item={"type": "message"}),
        _sse("response.output_text.delta", delta="the summary"),
        _sse("response.completed", response={"id": "r", "status": "completed", "output": [message]}),
    ]
    codec = CompactionStream(RESPONSES_SSE)
    sent = b"".join(codec.feed(chunk[:7]) + codec.feed(chunk[7:]) for chunk in upstream)  # split mid-event
    sent += codec.close(b"", None)
    events = [json.loads(line[6:]) for line in sent.decode().splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events] == [
        "response.created",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    assert b": ping" in sent and [e["sequence_number"] for e in events] == [0, 1, 2, 3]
    (item,) = events[-1]["response"]["output"]
    assert item["type"] == "compaction" and events[1]["item"] == item
    failing = CompactionStream(RESPONSES_SSE)
    out = failing.feed(_sse("response.created", response={"id": "r"}) + _sse("error", message="boom"))
    assert failing.close(b"", None) == b"" and out.count(b"event: error") == 1
    cut = CompactionStream(RESPONSES_SSE)
    cut.feed(_sse("response.created", response={"id": "r"}))
    assert b"event: error" in cut.close(b"", None)  # an upstream that ended early: the client hears it


def test_a_long_compaction_summary_is_never_silent() -> None:
    """The summary's own events are dropped; once KEEPALIVE_S has passed since the last byte, a
    dropped event sends a comment instead, and a sent event restarts the wait."""
    from orchestrator.serve.responses.adapter import RESPONSES_SSE
    from orchestrator.serve.responses.compaction_stream import KEEPALIVE_S, CompactionStream

    codec = CompactionStream(RESPONSES_SSE)
    assert codec.feed(_sse("response.output_text.delta", delta="a")) == b""  # just sent: quiet
    codec.sent_at -= KEEPALIVE_S + 1  # as if that long had passed
    assert codec.feed(_sse("response.output_text.delta", delta="b")).startswith(b": ")
    assert codec.feed(_sse("response.output_text.delta", delta="c")) == b""


def test_claude_code_session_header_names_the_session_on_every_route() -> None:
    """``X-Claude-Code-Session-Id`` keys a session as ``metadata.user_id``'s ``session_id`` does (the
    same id, the same key); ``prompt_cache_key`` still comes first."""
    header = [(b"x-claude-code-session-id", b"S-1")]
    messages = adapter_for("/v1/messages").route  # type: ignore[union-attr]
    chat = adapter_for("/v1/chat/completions").route  # type: ignore[union-attr]
    assert messages is not None and chat is not None
    meta = {"metadata": {"user_id": json.dumps({"session_id": "S-1"})}}
    assert messages.session_key({}, header) == messages.session_key(meta) == "s:S-1"
    assert chat.session_key({}, header) == "s:S-1" and chat.session_key({}) is None
    assert chat.session_key({"prompt_cache_key": "P"}, header) == "k:P"


def test_ids_and_summaries_decoded_from_json_strings_must_be_text() -> None:
    """A lone surrogate escaped inside a JSON string of the body (a session id in
    ``metadata.user_id``, a replayed call's ``arguments``, a sealed summary) is no text: the session
    is not named by it (``/status`` stays renderable), the call and the summary are a 400."""
    from orchestrator.serve.repair.agent_errors import checked_arguments
    from orchestrator.serve.responses.compaction import SEAL, expand

    messages = adapter_for("/v1/messages").route  # type: ignore[union-attr]
    assert messages is not None
    lone = {"metadata": {"user_id": json.dumps({"session_id": "\ud800"})}}
    assert messages.session_key(lone) is None
    long_id = messages.session_key({}, [(b"x-claude-code-session-id", "h\u00e9llo".encode() + b"x" * 60000)])
    assert long_id is not None and long_id.startswith("s:h\u00e9llo") and len(long_id) == 2 + 128
    with pytest.raises(ApiError) as caught:
        checked_arguments('{"a": "\\ud800"}', "messages[1].tool_calls[0].function.arguments")
    assert caught.value.status == 400 and caught.value.param == "messages[1].tool_calls[0].function.arguments"
    sealed = SEAL + base64.urlsafe_b64encode(b'{"summary": "\\ud800"}').decode()
    with pytest.raises(ApiError) as caught:
        expand({"type": "compaction", "encrypted_content": sealed})
    assert caught.value.status == 400


def test_a_compaction_trigger_keeps_previous_response_id_for_the_repair_to_refuse() -> None:
    responses = adapter_for("/v1/responses")
    assert responses is not None
    body = {
        "model": "demo",
        "previous_response_id": "resp_x",
        "input": [{"role": "user", "content": "hi"}, {"type": "compaction_trigger"}],
    }
    call = responses.open(body, json.dumps(body).encode())
    with pytest.raises(ApiError) as caught:
        call.prepare(ModelConfig(name="demo", path="/x.gguf"), RepairPolicy())
    assert caught.value.status == 400 and caught.value.param == "previous_response_id"


def test_a_responses_text_format_no_value_can_match_is_a_400() -> None:
    responses = adapter_for("/v1/responses")
    assert responses is not None
    fmt = {
        "type": "json_schema",
        "name": "x",
        "schema": {"type": "object", "properties": {"a": {"enum": []}}, "required": ["a"]},
    }
    with pytest.raises(ApiError) as caught:
        responses.route.prepare(
            {"model": "demo", "input": "hi", "text": {"format": fmt}},
            ModelConfig(name="demo", path="/x.gguf"),
            RepairPolicy(),
        )
    assert caught.value.status == 400 and caught.value.param == "text.format.schema.properties.a"
