"""What coding agents send, repaired on literals: Codex's tools and replayed items, Claude Code's
system prompt, late system messages, thinking, tool results (pure modules, no server)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.errors import ApiError
from orchestrator.serve.anthropic import repair as anthropic
from orchestrator.serve.repair.chat import RepairPolicy
from orchestrator.serve.repair.stability import drop_volatile
from orchestrator.serve.repair.thinking import chat_thinking
from orchestrator.serve.responses import repair as responses
from orchestrator.serve.responses.items import normalize_item
from orchestrator.serve.responses.tools import client_call, map_tools, remap_output

DATA = Path(__file__).resolve().parents[2] / "data"
USER = {"role": "user", "content": "Hi"}
FN = {"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {}}}
NAMESPACE = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Sub-agents.",
    "tools": [{"type": "function", "name": "spawn_agent", "description": "Spawn.", "parameters": {"type": "object"}}],
}
CUSTOM = {"type": "custom", "name": "apply_patch", "description": "Patch files.", "format": {"type": "text"}}


def test_codex_default_tools_are_mapped_or_skipped() -> None:
    body = {"model": "demo", "input": "hi", "tools": [FN, NAMESPACE, CUSTOM, {"type": "web_search"}]}
    result = responses.repair_request(body, RepairPolicy())
    names = [t["name"] for t in result.body["tools"]]
    assert names == ["exec_command", "multi_agent_v1.spawn_agent", "apply_patch"]
    assert all(t["type"] == "function" for t in result.body["tools"])
    assert result.body["tools"][2]["parameters"]["required"] == ["input"]
    assert {"tools_mapped", "hosted_tool_skipped"} <= set(result.repairs)


def test_model_calls_come_back_in_codex_form() -> None:
    tool_map = map_tools([FN, NAMESPACE, CUSTOM, {"type": "local_shell"}])
    assert tool_map.skipped == ["local_shell"]
    ns = {"type": "function_call", "call_id": "c1", "name": "multi_agent_v1.spawn_agent", "arguments": "{}"}
    assert client_call(ns, tool_map) == {**ns, "name": "spawn_agent", "namespace": "multi_agent_v1"}
    patch = {"type": "function_call", "call_id": "c2", "name": "apply_patch", "arguments": '{"input": "*** Begin"}'}
    assert client_call(patch, tool_map) == {
        "type": "custom_tool_call",
        "call_id": "c2",
        "name": "apply_patch",
        "input": "*** Begin",
    }
    plain = {"type": "function_call", "call_id": "c3", "name": "exec_command", "arguments": "{}"}
    output = [plain, ns, patch]
    assert client_call(plain, tool_map) is None and remap_output(output, tool_map)
    assert [o["type"] for o in output] == ["function_call", "function_call", "custom_tool_call"]


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ({"role": "assistant", "content": "Done."}, {"role": "assistant", "content": "Done.", "type": "message"}),
        (
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Think."}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Think."}],
             "content": [{"type": "reasoning_text", "text": "Think."}]},
        ),
        ({"type": "reasoning", "summary": [], "encrypted_content": "gAAAA"}, None),
        (
            {"type": "function_call_output", "call_id": "c", "output": [{"type": "output_text", "text": "a"},
                                                                          {"type": "output_text", "text": "b"}]},
            {"type": "function_call_output", "call_id": "c", "output": "ab"},
        ),
        (
            {"type": "function_call", "call_id": "c", "name": "spawn_agent", "namespace": "multi_agent_v1",
             "arguments": "{}"},
            {"type": "function_call", "call_id": "c", "name": "multi_agent_v1.spawn_agent", "arguments": "{}"},
        ),
        (
            {"type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": "*** Begin"},
            {"type": "function_call", "call_id": "c", "name": "apply_patch", "arguments": '{"input": "*** Begin"}'},
        ),
        (
            {"type": "custom_tool_call_output", "call_id": "c", "output": "ok"},
            {"type": "function_call_output", "call_id": "c", "output": "ok"},
        ),
    ],
)  # fmt: skip
def test_replayed_items_become_what_llama_server_reads(item: dict[str, Any], expected: Any) -> None:
    assert normalize_item(item, "input[0]") == expected


def test_unknown_items_are_a_400_naming_them() -> None:
    with pytest.raises(ApiError) as err:
        normalize_item({"type": "telepathy"}, "input[3]")
    assert err.value.param == "input[3].type"
    with pytest.raises(ApiError) as err:
        map_tools([{"type": "namespace", "name": "n", "tools": "x"}])
    assert err.value.param == "tools[0].tools"


def test_the_billing_header_line_is_dropped() -> None:
    assert drop_volatile("x-anthropic-billing-header: cc_version=2.1.197.c23; cc_entrypoint=sdk-cli;") == ""
    old = "x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=a5145;You are Claude Code."
    assert drop_volatile(old) == "You are Claude Code."
    assert drop_volatile("You are helpful.") == "You are helpful."


def test_claude_code_first_request_keeps_its_system_message_in_place() -> None:
    body = json.loads((DATA / "claude_code_first_request.json").read_text())
    result = anthropic.repair_request(body, RepairPolicy())
    assert not result.body["system"].startswith("x-anthropic-billing-header")
    assert result.body["system"].startswith("You are a Claude agent")
    [user] = result.body["messages"]
    agents = body["messages"][1]["content"].strip()
    assert user["content"][-1] == {"type": "text", "text": f"<system-reminder>\n{agents}\n</system-reminder>"}
    assert {"system_in_place", "volatile_dropped"} <= set(result.repairs)
    merged = anthropic.repair_request(body, RepairPolicy(system_messages="merge"))
    assert merged.body["system"].endswith(agents)


@pytest.mark.parametrize(
    ("ttype", "default", "client_thinking", "expected"),
    [
        ("adaptive", False, False, False),  # Claude Code on a model configured thinking: false stays off
        ("adaptive", True, False, True),
        ("adaptive", None, False, True),  # nothing configured: the client's default applies
        ("adaptive", False, True, True),  # the model lets clients switch it
        ("enabled", False, False, True),  # an explicit switch always wins
        ("disabled", True, False, False),
    ],
)
def test_configured_thinking_wins_over_adaptive(
    ttype: str, default: Any, client_thinking: bool, expected: bool
) -> None:
    body = {"messages": [USER], "thinking": {"type": ttype}}
    policy = RepairPolicy(thinking_default=default, client_thinking=client_thinking)
    result = anthropic.repair_request(body, policy)
    assert result.body["chat_template_kwargs"] == {"enable_thinking": expected} and result.thinking is expected


def test_tool_results_come_right_after_their_call() -> None:
    call = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]}
    mixed = {
        "role": "user",
        "content": [
            {"type": "text", "text": "also this"},
            {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
        ],
    }
    result = anthropic.repair_request({"messages": [USER, call, mixed]}, RepairPolicy())
    assert result.body["messages"][2:] == [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
        {"role": "user", "content": [{"type": "text", "text": "also this"}]},
    ]
    assert "tool_results_first" in result.repairs


def _llama_events(call: dict[str, Any]) -> list[dict[str, Any]]:
    """The Responses events llama-server streams for one tool call (server-task.cpp), in order."""
    added = {"type": "response.output_item.added", "item": {**call, "arguments": ""}}
    done = {"type": "response.output_item.done", "item": call}
    usage = {"input_tokens": 30, "output_tokens": 9}
    completed = {"type": "response.completed", "response": {"status": "completed", "output": [call], "usage": usage}}
    return [added, done, completed]


class _Answered:
    """What ``ResponsesRoute.fix`` reads of a request in flight (``adapters.route.Request``)."""

    def __init__(self, client_body: dict[str, Any]) -> None:
        self.client_body, self.model, self.kinds = client_body, None, []
        self.continued, self.thinking, self.attempt = None, False, 1  # no answer that ended in its thinking
        self.call = SimpleNamespace(answer_fix=None)  # not prepared here: the answer side is made from the body

    def count_repair(self, kind: str) -> None:
        self.kinds.append(kind)


def test_codex_calls_are_answered_in_its_form_whole_and_streamed() -> None:
    """The model's call of a namespaced function (as llama-server reports it) reaches Codex with
    name and namespace; a custom tool's call as a custom_tool_call; plain functions untouched."""
    from orchestrator.serve.responses.adapter import ResponsesRoute
    from orchestrator.serve.responses.answer import ResponsesAnswer, ResponsesStreamFix

    request = {"input": "hi", "tools": [FN, NAMESPACE, CUSTOM, {"type": "web_search"}], "max_output_tokens": 64}
    ns_call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "status": "completed",
               "name": "multi_agent_v1.spawn_agent", "arguments": "{}"}  # fmt: skip
    stream = ResponsesStreamFix(ResponsesAnswer.of(request, None))
    fixed = [stream.repair(e)[0] for e in _llama_events(ns_call)]
    assert [f["item"]["namespace"] for f in fixed[:2]] == ["multi_agent_v1"] * 2
    assert fixed[2]["response"]["output"][0] == {**ns_call, "name": "spawn_agent", "namespace": "multi_agent_v1"}
    custom_call = {**ns_call, "name": "apply_patch", "arguments": json.dumps({"input": "*** Begin Patch"})}
    whole = {"object": "response", "status": "completed", "output": [custom_call], "usage": {"output_tokens": 9}}
    answered = _Answered(request)
    obj, changed = ResponsesRoute().fix(answered, whole)  # type: ignore[misc,arg-type]
    [out] = obj["output"]
    assert changed and out["type"] == "custom_tool_call" and out["input"] == "*** Begin Patch"
    assert answered.kinds == ["tool_calls_mapped"]
    plain = {**ns_call, "name": "exec_command"}
    assert ResponsesStreamFix(ResponsesAnswer.of(request, None)).repair(_llama_events(plain)[1])[0]["item"] == plain


@pytest.mark.parametrize("effort", ["ultra", "HIGH", ""])
def test_unknown_efforts_are_a_400_naming_the_field(effort: str) -> None:
    """An unknown effort string turned thinking on without a word."""
    body = {"model": "demo", "input": "hi", "reasoning": {"effort": effort}}
    with pytest.raises(ApiError) as err:
        responses.repair_request(body, RepairPolicy(thinking_default=False))
    assert err.value.status == 400 and err.value.param == "reasoning.effort"
    with pytest.raises(ApiError) as err:
        chat_thinking({"messages": [USER], "reasoning_effort": effort}, False, lambda kind: None)
    assert err.value.status == 400 and err.value.param == "reasoning_effort"
    for known in ("none", "minimal", "low", "medium", "high", "xhigh"):
        assert chat_thinking({"messages": [USER], "reasoning_effort": known}, False, lambda kind: None) is None
        responses.repair_request({**body, "reasoning": {"effort": known}}, RepairPolicy())


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ({"type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": 5}, "input[2].input"),
        ({"type": "custom_tool_call", "call_id": "c", "name": "apply_patch"}, "input[2].input"),
        ({"type": "function_call", "call_id": "c", "name": "f", "namespace": 5, "arguments": "{}"},
         "input[2].namespace"),
    ],
)  # fmt: skip
def test_malformed_call_fields_are_a_400_naming_them(item: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as err:
        normalize_item(item, "input[2]")
    assert err.value.status == 400 and err.value.param == param


def test_replayed_hosted_items_are_skipped_the_same_way_every_turn() -> None:
    """A session that started on a hosted model replays its hosted-tool items: each was a 400."""
    hosted = [
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "x"}},
        {"type": "local_shell_call", "id": "ls_1", "call_id": "c9", "status": "completed",
         "action": {"type": "exec", "command": ["ls"], "env": {}}},
        {"type": "local_shell_call_output", "call_id": "c9", "output": "a.txt"},
        {"type": "compaction", "encrypted_content": "gAAAA"},
        {"type": "item_reference", "id": "msg_1"},
        {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": "iVBOR"},
        {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["q"]},
    ]  # fmt: skip
    answer = {"role": "assistant", "content": [{"type": "output_text", "text": "Done."}]}
    turn1 = {"model": "demo", "input": [USER, *hosted, answer]}
    turn2 = {**turn1, "input": [*turn1["input"], {"role": "user", "content": "More?"}]}
    first, second = (responses.repair_request(b, RepairPolicy()) for b in (turn1, turn2))
    assert first.body["input"] == [USER, {**answer, "type": "message"}]
    assert second.body["input"][: len(first.body["input"])] == first.body["input"]
    assert "hosted_item_skipped" in first.repairs and "hosted_item_skipped" in second.repairs
    with pytest.raises(ApiError) as err:
        responses.repair_request({"model": "demo", "input": [USER, *hosted, {"type": "telepathy"}]}, RepairPolicy())
    assert err.value.param == "input[8].type"


@pytest.mark.parametrize(
    ("choice", "expected", "tools"),
    [
        ({"type": "function", "name": "spawn_agent", "namespace": "multi_agent_v1"}, "required",
         ["multi_agent_v1.spawn_agent"]),
        ({"type": "custom", "name": "apply_patch"}, "required", ["apply_patch"]),
        ({"type": "function", "name": "exec_command"}, "required", ["exec_command"]),
        ({"type": "web_search"}, "auto", ["exec_command", "multi_agent_v1.spawn_agent", "apply_patch"]),
        ({"type": "allowed_tools", "mode": "auto", "tools": [{"type": "custom", "name": "apply_patch"},
                                                            {"type": "web_search"}]}, "auto", ["apply_patch"]),
        ("required", "required", ["exec_command", "multi_agent_v1.spawn_agent", "apply_patch"]),
    ],
)  # fmt: skip
def test_tool_choice_names_the_tool_as_mapped(choice: Any, expected: str, tools: list[str]) -> None:
    """llama-server takes any tool_choice object as auto: a named one forces the tool it was mapped to."""
    body = {
        "model": "demo",
        "input": "hi",
        "tools": [FN, NAMESPACE, CUSTOM, {"type": "web_search"}],
        "tool_choice": choice,
    }
    result = responses.repair_request(body, RepairPolicy())
    assert result.body["tool_choice"] == expected
    assert [t["name"] for t in result.body["tools"]] == tools
    assert "hosted_tool_skipped" in result.repairs


@pytest.mark.parametrize(
    "choice",
    [
        {"type": "function", "name": "spawn_agent"},
        {"type": "function", "name": "apply_patch"},
        {"type": "custom", "name": "exec_command"},
        {"type": "function", "name": "spawn_agent", "namespace": "other"},
        {"type": "file_search"},
        {"type": "function"},
        "sometimes",
    ],
)
def test_tool_choice_naming_a_tool_not_in_tools_is_a_400(choice: Any) -> None:
    body = {
        "model": "demo",
        "input": "hi",
        "tools": [FN, NAMESPACE, CUSTOM, {"type": "web_search"}],
        "tool_choice": choice,
    }
    with pytest.raises(ApiError) as err:
        responses.repair_request(body, RepairPolicy())
    assert err.value.status == 400 and err.value.param == "tool_choice"
