"""The pure request translations of the client APIs on literal bodies (no server needed):
Anthropic and Responses repair, structured-output checks, Ollama translations."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.errors import ApiError
from orchestrator.serve.anthropic import repair as anthropic
from orchestrator.serve.ollama import translate as ollama
from orchestrator.serve.repair import structured
from orchestrator.serve.repair.chat import SYSTEM_AS_USER_PREFIX, RepairPolicy
from orchestrator.serve.repair.chat import repair_request as chat_repair
from orchestrator.serve.repair.token_probs import drafting_off, trim, wants_token_probs, widen
from orchestrator.serve.responses import repair as responses

USER = {"role": "user", "content": "Hi"}


def test_anthropic_compliant_body_is_untouched() -> None:
    body = {"model": "m", "system": "S", "messages": [USER], "max_tokens": 4}
    result = anthropic.repair_request(body, RepairPolicy())
    assert result.body is body and not result.changed and result.thinking


def test_anthropic_system_turns_merge_or_become_user_turns() -> None:
    body = {"system": [{"type": "text", "text": "A"}], "messages": [USER, {"role": "system", "content": "B"}]}
    merged = anthropic.repair_request(body, RepairPolicy(system_messages="merge"))
    assert merged.body["system"] == "A\n\nB" and merged.body["messages"] == [USER]
    assert merged.repairs == ["system_merged", "system_blocks_joined"]
    to_user = anthropic.repair_request(body, RepairPolicy(system_messages="to_user"))
    assert to_user.body["messages"][1] == {"role": "user", "content": SYSTEM_AS_USER_PREFIX + "B"}


@pytest.mark.parametrize(
    ("thinking", "default", "expected"),
    [({"type": "enabled", "budget_tokens": 9}, False, True), ({"type": "disabled"}, True, False), (None, False, False)],
)
def test_anthropic_thinking_maps_to_enable_thinking(thinking: Any, default: bool, expected: bool) -> None:
    body: dict[str, Any] = {"messages": [USER]}
    if thinking is not None:
        body["thinking"] = thinking
    result = anthropic.repair_request(body, RepairPolicy(thinking_default=default))
    assert result.body["chat_template_kwargs"] == {"enable_thinking": expected} and result.thinking is expected


def test_anthropic_empty_assistant_turns_are_dropped() -> None:
    empty = [{"role": "assistant", "content": [{"type": "text", "text": " "}]}, {"role": "assistant", "content": ""}]
    result = anthropic.repair_request({"messages": [USER, *empty, USER]}, RepairPolicy())
    assert result.body["messages"] == [USER, USER] and result.repairs == ["empty_dropped"]


def test_anthropic_tool_choice_none_and_named() -> None:
    tools = [{"name": "a", "input_schema": {}}, {"name": "b", "input_schema": {}}]
    none = anthropic.repair_request(
        {"messages": [USER], "tools": tools, "tool_choice": {"type": "none"}}, RepairPolicy()
    )
    assert "tools" not in none.body and "tool_choice" not in none.body
    named = anthropic.repair_request(
        {"messages": [USER], "tools": tools, "tool_choice": {"type": "tool", "name": "b"}}, RepairPolicy()
    )
    assert named.body["tools"] == [tools[1]]
    with pytest.raises(ApiError) as err:
        anthropic.repair_request(
            {"messages": [USER], "tools": tools, "tool_choice": {"type": "tool", "name": "z"}}, RepairPolicy()
        )
    assert err.value.param == "tool_choice.name"


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([{"role": "tool", "content": "x"}], "messages[0].role"),
        ([{"role": "user", "content": [{"type": "document", "source": {}}]}], "messages[0].content[0].type"),
        ([{"role": "user", "content": [{"type": "image", "source": {}}]}], "messages[0].content[0].type"),
        ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]}], "messages"),
    ],
)
def test_anthropic_refusals_name_the_field(messages: list[Any], param: str) -> None:
    with pytest.raises(ApiError) as err:
        anthropic.repair_request({"messages": messages}, RepairPolicy())
    assert err.value.status == 400 and err.value.param == param


def test_anthropic_error_shape() -> None:
    body = anthropic.error_body(ApiError(503, "loading", retry_after=5))
    assert body == {"type": "error", "error": {"type": "overloaded_error", "message": "loading"}}
    assert anthropic.error_event(ApiError(400, "bad", param="x")).startswith(b"event: error\ndata: ")


def test_responses_system_items_join_instructions_and_format_maps() -> None:
    body = {
        "instructions": "I",
        "input": [{"role": "developer", "content": [{"type": "input_text", "text": "D"}]}, USER],
        "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}},
        "speculative": {"n_max": 2},
    }
    result = responses.repair_request(body, RepairPolicy(thinking_default=False))
    out = result.body
    assert out["instructions"] == "I\n\nD" and out["input"] == [USER]
    assert out["response_format"]["json_schema"]["schema"] == {"type": "object"} and out["text"] == {}
    assert out["speculative.n_max"] == 2 and "speculative" not in out
    assert out["chat_template_kwargs"] == {"enable_thinking": False} and not result.thinking


def test_responses_effort_none_means_thinking_off_and_no_default() -> None:
    result = responses.repair_request(
        {"input": "x", "reasoning": {"effort": "none"}}, RepairPolicy(thinking_default=True)
    )
    assert not result.thinking and "chat_template_kwargs" not in result.body


def test_responses_effort_null_keeps_the_default_and_a_non_string_is_a_400() -> None:
    policy = RepairPolicy(thinking_default=False)
    result = responses.repair_request({"input": "x", "reasoning": {"effort": None}}, policy)
    assert not result.thinking and result.body["chat_template_kwargs"] == {"enable_thinking": False}
    for effort in (False, 5, ["high"]):
        with pytest.raises(ApiError) as err:
            responses.repair_request({"input": "x", "reasoning": {"effort": effort}}, policy)
        assert err.value.status == 400 and err.value.param == "reasoning.effort"


FN_X = {"type": "function", "name": "get_x", "strict": False, "parameters": {"type": "object"}}
FN_W = {"type": "function", "name": "get_w", "description": "W", "parameters": {"type": "object"}}


def _codex_input(*items: Any) -> dict[str, Any]:
    return {"tools": [FN_X], "input": [{"role": "user", "content": "U1"}, *items, {"role": "user", "content": "U2"}]}


def test_responses_codex_additional_tools_render_in_place_and_keep_the_tools_block() -> None:
    out = responses.repair_request(
        _codex_input({"type": "additional_tools", "role": "developer", "tools": [FN_W]}), RepairPolicy()
    )
    assert "tool_change_rendered" in out.repairs
    assert [t["name"] for t in out.body["tools"]] == ["get_x", "get_w"]  # offered now
    # the prompt's tools block as a turn without the change renders it (strict is not rendered)
    assert out.body["render_tools"] == [
        {"type": "function", "function": {"name": "get_x", "parameters": {"type": "object"}}}
    ]
    assert "The tool get_w is now available. Its definition:" in str(out.body["input"])
    with pytest.raises(ApiError) as bad:
        responses.repair_request(
            _codex_input({"type": "additional_tools", "role": "developer", "tools": 5}), RepairPolicy()
        )
    assert bad.value.param == "input[1].tools"


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ({"type": "configuration_update", "reasoning": {"effort": "high"}}, None),
        ({"type": "compaction_trigger"}, None),
        ({"type": "other"}, None),
        ({"type": "context_compaction", "encrypted_content": "gAAA"}, None),
        (
            {
                "type": "agent_message",
                "author": "/root/w",
                "recipient": "/root",
                "content": [
                    {"type": "input_text", "text": "done"},
                    {"type": "encrypted_content", "encrypted_content": "x"},
                ],
            },
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "done"}]},
        ),
        (
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": [
                    {"type": "input_text", "text": "R"},
                    {"type": "encrypted_content", "encrypted_content": "x"},
                ],
            },
            {"type": "function_call_output", "call_id": "c1", "output": "R"},
        ),
    ],
    ids=["configuration_update", "compaction_trigger", "other", "context_compaction", "agent_message", "sealed_output"],
)
def test_responses_codex_items_are_read_or_skipped(item: dict[str, Any], expected: Any) -> None:
    out = responses.repair_request(_codex_input(item), RepairPolicy())
    assert out.body["input"][1:-1] == ([expected] if expected is not None else []), out.body["input"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"response_format": {"type": "json_schema", "json_schema": {}}}, "response_format.json_schema.schema"),
        ({"response_format": ["json"]}, "response_format"),
        ({"response_format": {"type": "json_object"}, "grammar": "root ::= x"}, "grammar"),
    ],
)
def test_structured_check(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as err:
        structured.check(body)
    assert err.value.param == param


def test_structured_schema_error_only_for_upstream_5xx_with_a_schema() -> None:
    body = {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "foo"}}}}
    upstream = ApiError(502, "llama-server answered 500: JSON schema error", code="upstream_error")
    assert structured.schema_error(upstream, body).status == 400
    assert structured.schema_error(upstream, {"messages": []}) is upstream
    assert structured.schema_error(ApiError(503, "x"), body).status == 503


def test_zero_candidates_are_widened_then_trimmed() -> None:
    chat = {"messages": [USER], "logprobs": True, "top_logprobs": 0}
    assert widen(chat) == {**chat, "top_logprobs": 1} and widen({**chat, "top_logprobs": 2}) is None
    assert widen({"prompt": "x", "logprobs": 0}) == {"prompt": "x", "logprobs": 1}
    assert widen({"prompt": "x", "logprobs": False}) is None
    answer = {"choices": [{"logprobs": {"content": [{"token": "a", "logprob": -1.0, "top_logprobs": [{"x": 1}]}]}}]}
    assert trim(answer) and answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"] == []
    assert not trim(answer)


def test_token_prob_fields_turn_drafting_off() -> None:
    assert wants_token_probs({"logprobs": True}) and wants_token_probs({"n_probs": 1})
    assert wants_token_probs({"logprobs": 3}) and not wants_token_probs({"logprobs": False, "n_probs": 0})
    assert wants_token_probs({"prompt": "x", "logprobs": 0}) and not wants_token_probs({"messages": [], "logprobs": 0})
    assert drafting_off({"speculative.n_max": 3, "speculative.n_min": 2, "x": 1}) == {"x": 1, "speculative.n_max": 0}


def test_ollama_chat_translation() -> None:
    body = {
        "model": "demo:latest",
        "messages": [
            {"role": "user", "content": "hi", "images": ["AAAA"]},
            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
            {"role": "tool", "content": "r", "tool_name": "f"},
        ],
        "options": {"temperature": 0.1, "num_predict": 7, "num_ctx": 4096},
        "format": "json",
        "think": "high",
        "keep_alive": "5m",
    }
    oai = ollama.chat_request(body)
    assert oai["model"] == "demo" and oai["stream"] is True and oai["stream_options"] == {"include_usage": True}
    assert oai["messages"][0]["content"][1]["image_url"]["url"] == "data:image/png;base64,AAAA"
    assert oai["messages"][1]["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": 1}'}
    assert oai["messages"][2]["tool_call_id"] == "f"
    assert oai["temperature"] == 0.1 and oai["max_tokens"] == 7 and "num_ctx" not in oai
    assert oai["response_format"] == {"type": "json_object"}
    assert oai["chat_template_kwargs"] == {"enable_thinking": True}


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("5m", 300.0),
        (30, 30.0),
        ("-1", -1.0),
        ("1.5h", 5400.0),
        (None, None),
        # longer than Go's time.Duration (Ollama's type) holds: never unload
        (1e300, -1.0),
        ("99999999999999h", -1.0),
    ],
)
def test_ollama_keep_alive(value: Any, seconds: float | None) -> None:
    assert ollama.keep_alive_seconds(value) == seconds


@pytest.mark.parametrize("value", ["9" * 400, "9" * 400 + "h", "1" + "0" * 320 + "ns"])
def test_ollama_keep_alive_beyond_any_float_is_a_400(value: str) -> None:
    with pytest.raises(ApiError) as err:
        ollama.keep_alive_seconds(value)
    assert err.value.status == 400 and err.value.param == "keep_alive"


def test_ollama_stream_translation_ends_with_done_and_tool_calls() -> None:
    t = ollama.StreamTranslator("demo", 0.0, generate=False)
    assert t.feed({"choices": [{"index": 0, "delta": {"content": "He"}, "finish_reason": None}]})[0]["message"] == {
        "role": "assistant",
        "content": "He",
    }
    call = {"index": 0, "id": "c", "function": {"name": "f", "arguments": '{"a":'}}
    assert t.feed({"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]}) == []
    more = {"index": 0, "function": {"arguments": "1}"}}
    t.feed({"choices": [{"index": 0, "delta": {"tool_calls": [more]}, "finish_reason": "tool_calls"}]})
    [done] = t.feed({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}})
    assert done["done"] is True and done["eval_count"] == 2 and done["prompt_eval_count"] == 3
    assert done["message"]["tool_calls"] == [{"function": {"name": "f", "arguments": {"a": 1}}}]


PNG_URL = "data:image/png;base64,iVBORw0KGgo="


def _media_bodies(url: str) -> dict[str, tuple[Any, Any, str]]:
    """One image part per API: (repair, body, the param a refusal names)."""
    return {
        "chat": (
            chat_repair,
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]},
            "messages[0].content[0].image_url.url",
        ),
        "anthropic": (
            anthropic.repair_request,
            {"max_tokens": 8,
             "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": url}}]}]},
            "messages[0].content[0].source.url",
        ),
        "responses": (
            responses.repair_request,
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": url}]}]},
            "input[0].content[0].image_url",
        ),
    }  # fmt: skip


@pytest.mark.parametrize("api", ["chat", "anthropic", "responses"])
def test_media_urls_are_inline_unless_the_model_fetches(api: str) -> None:
    """A data: URL goes through on a model with a projector; an http(s) URL, which llama-server
    would download itself, is a 400 naming the part unless ``fetch_media_urls``; file:// never."""
    eyes = RepairPolicy(multimodal=True)
    repair, body, param = _media_bodies(PNG_URL)[api]
    repair(body, eyes)
    repair, body, param = _media_bodies("https://example.com/a.png")[api]
    with pytest.raises(ApiError) as refused:
        repair(body, eyes)
    assert refused.value.param == param and "data: URL" in str(refused.value)
    repair(body, RepairPolicy(multimodal=True, fetch_media_urls=True))
    repair, body, param = _media_bodies("file:///etc/passwd")[api]
    with pytest.raises(ApiError):
        repair(body, RepairPolicy(multimodal=True, fetch_media_urls=True))
