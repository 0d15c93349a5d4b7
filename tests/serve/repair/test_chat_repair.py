"""Request repair (orchestrator.serve.repair.chat): the user-reported cases C01-C09 plus each rule on its own."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import ApiError
from orchestrator.serve.repair.chat import (
    SYSTEM_AS_USER_PREFIX,
    RepairPolicy,
    normalize_messages,
    repair_request,
)

CASES_FILE = Path(__file__).resolve().parents[2] / "data" / "chat_requests.json"
CASES: list[dict[str, Any]] = json.loads(CASES_FILE.read_text())["cases"]

# Every key a case may carry, and therefore every key test_case asserts on. A new key in the
# cases file fails test_case_keys_are_all_asserted instead of being silently ignored.
CASE_KEYS = {
    "id",
    "kind",
    "input",
    "upstream_messages",
    "expect_status",
    "expect_error",
    "expect_upstream_called",
    "expect_upstream_body_has",
    "expect_upstream_body_lacks",
    "expect_upstream_messages_unchanged",
}


def _repair(body: dict[str, Any], **policy: Any) -> Any:
    return repair_request(body, RepairPolicy(**policy))


def _error(body: dict[str, Any], **policy: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        _repair(body, **policy)
    assert info.value.status == 400
    assert info.value.type == "invalid_request_error"
    return info.value


def test_case_keys_are_all_asserted() -> None:
    assert [c["id"] for c in CASES] == [f"C0{i}" for i in range(1, 10)]
    for case in CASES:
        assert set(case) <= CASE_KEYS, case["id"]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case(case: dict[str, Any]) -> None:
    body = copy.deepcopy(case["input"])
    pristine = copy.deepcopy(body)
    if case["expect_status"] == 400:
        err = _error(body)
        assert err.type == case["expect_error"]["type"]
        assert err.param == case["expect_error"]["param"]
        assert case["expect_upstream_called"] is False  # an ApiError means nothing is sent
    else:
        assert case["expect_status"] == 200
        result = _repair(body)
        if "upstream_messages" in case:
            assert result.body["messages"] == case["upstream_messages"]
        for key, value in case.get("expect_upstream_body_has", {}).items():
            assert result.body[key] == value
        for key in case.get("expect_upstream_body_lacks", []):
            assert key not in result.body
        if case.get("expect_upstream_messages_unchanged"):
            assert result.body is body
            assert result.changed is False and result.repairs == []
        else:
            assert result.changed is True and result.repairs
        # everything but the repaired fields reaches llama-server as sent
        for key, value in pristine.items():
            if key not in ("messages", "enable_thinking"):
                assert result.body[key] == value
    assert body == pristine, "the caller's body was mutated"


@pytest.mark.parametrize(
    ("case_id", "kinds"),
    [
        ("C01", ["system_in_place"]),
        ("C02", ["system_merged"]),
        ("C03", ["developer_role"]),
        ("C05", ["null_content"]),
        ("C06", ["empty_dropped"]),
        ("C08", ["thinking_moved"]),
        ("C09", []),
    ],
)
def test_case_repair_kinds(case_id: str, kinds: list[str]) -> None:
    case = next(c for c in CASES if c["id"] == case_id)
    assert _repair(copy.deepcopy(case["input"])).repairs == kinds


# --- system and developer messages -----------------------------------------------------------


def test_merge_every_system_and_developer_message_in_order() -> None:
    body = {
        "model": "demo",
        "messages": [
            {"role": "developer", "content": "A"},
            {"role": "user", "content": "q1"},
            {"role": "system", "content": "  B\n"},
            {"role": "assistant", "content": "a1"},
            {"role": "developer", "content": "C"},
            {"role": "user", "content": "q2"},
        ],
    }
    result = _repair(body, system_messages="merge")
    assert result.body["messages"] == [
        {"role": "system", "content": "A\n\nB\n\nC"},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
    ]
    assert result.repairs == ["developer_role", "system_merged", "system_moved"]
    assert body["messages"][0] == {"role": "developer", "content": "A"}


def test_to_user_merges_the_leading_run_and_turns_late_ones_into_user_messages() -> None:
    body = {
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "developer", "content": "Use metric units."},
            {"role": "user", "content": "Plan a picnic."},
            {"role": "assistant", "content": "Where?"},
            {"role": "system", "content": " Answer in one sentence. "},
            {"role": "user", "content": "In a park."},
        ]
    }
    result = _repair(body, system_messages="to_user")
    assert result.body["messages"] == [
        {"role": "system", "content": "You are terse.\n\nUse metric units."},
        {"role": "user", "content": "Plan a picnic."},
        {"role": "assistant", "content": "Where?"},
        {"role": "user", "content": SYSTEM_AS_USER_PREFIX + "Answer in one sentence."},
        {"role": "user", "content": "In a park."},
    ]
    assert result.repairs == ["developer_role", "system_merged", "system_to_user"]


def test_to_user_with_no_leading_system_message() -> None:
    case = next(c for c in CASES if c["id"] == "C01")
    result = _repair(copy.deepcopy(case["input"]), system_messages="to_user")
    assert result.body["messages"] == [
        {"role": "user", "content": "Plan a picnic."},
        {"role": "assistant", "content": "Sure, where?"},
        {"role": "user", "content": SYSTEM_AS_USER_PREFIX + "Answer in one sentence."},
        {"role": "user", "content": "In a park."},
    ]
    assert result.repairs == ["system_to_user"]


def test_single_system_message_at_start_keeps_its_whitespace() -> None:
    # The template trims it anyway; a compliant request is never rewritten.
    body = {"messages": [{"role": "system", "content": "  Be brief.\n"}, {"role": "user", "content": "Hi"}]}
    assert _repair(body).body is body


def test_system_message_first_after_a_dropped_empty_assistant_is_not_moved() -> None:
    body = {
        "messages": [
            {"role": "assistant", "content": ""},
            {"role": "system", "content": "S"},
            {"role": "user", "content": "Hi"},
        ]
    }
    result = _repair(body)
    assert result.body["messages"] == [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}]
    assert result.repairs == ["empty_dropped"]


# --- content ---------------------------------------------------------------------------------


def test_text_parts_are_joined_with_no_separator_like_the_template() -> None:
    body = {
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}]},
            {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "\nworld"}]},
            {"role": "tool", "tool_call_id": "c1", "content": []},
        ]
    }
    result = _repair(body)
    assert result.body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello\nworld"},
        {"role": "tool", "tool_call_id": "c1", "content": ""},
    ]
    assert result.repairs == ["content_parts_joined"]
    assert isinstance(body["messages"][1]["content"], list)


def test_missing_content_becomes_empty_string() -> None:
    calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    body = {"messages": [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": calls}]}
    result = _repair(body)
    assert result.body["messages"][1] == {"role": "assistant", "tool_calls": calls, "content": ""}
    assert result.body["messages"][1]["tool_calls"] is calls
    assert result.repairs == ["null_content"]


def test_null_user_content_is_kept_as_an_empty_user_message() -> None:
    result = _repair({"messages": [{"role": "user", "content": None}]})
    assert result.body["messages"] == [{"role": "user", "content": ""}]


def test_whitespace_assistant_with_tool_calls_is_kept() -> None:
    calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    body = {
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": " ", "tool_calls": calls},
            {"role": "tool", "tool_call_id": "c", "content": "ok"},
        ]
    }
    assert _repair(body).body is body


@pytest.mark.parametrize("part_type", ["image_url", "input_audio", "input_video", "video_url"])
def test_media_parts_are_refused_for_a_text_only_model(part_type: str) -> None:
    body = {
        "messages": [
            {"role": "system", "content": "S"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": part_type, part_type: {"url": "data:image/png;base64,AA=="}},
                ],
            },
        ]
    }
    assert _error(body).param == "messages[1].content[1].type"


def test_image_parts_are_kept_as_a_list_for_a_multimodal_model() -> None:
    parts = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
    ]
    body = {"messages": [{"role": "user", "content": parts}]}
    result = _repair(body, multimodal=True)
    assert result.body is body and result.body["messages"][0]["content"] is parts


def test_an_image_only_user_message_counts_as_a_query() -> None:
    parts = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]
    body = {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": parts}]}
    assert _repair(body, multimodal=True).body is body


def test_system_message_cannot_contain_images_even_when_multimodal() -> None:
    body = {
        "messages": [
            {"role": "system", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
            {"role": "user", "content": "Hi"},
        ]
    }
    assert _error(body, multimodal=True).param == "messages[0].content[0].type"


@pytest.mark.parametrize(
    ("content", "param"),
    [
        ([{"type": "refusal", "refusal": "no"}], "messages[0].content[0].type"),
        ([{"text": "no type"}], "messages[0].content[0].type"),
        ([{"type": "text", "text": "ok"}, "bare string"], "messages[0].content[1]"),
        ([{"type": "text", "text": 7}], "messages[0].content[0].text"),
        ([{"type": "text"}], "messages[0].content[0].text"),
        (42, "messages[0].content"),
        ({"type": "text", "text": "a dict"}, "messages[0].content"),
        (True, "messages[0].content"),
    ],
)
def test_invalid_content_is_a_400_naming_the_field(content: Any, param: str) -> None:
    assert _error({"messages": [{"role": "user", "content": content}]}).param == param


# --- roles and message list ------------------------------------------------------------------


@pytest.mark.parametrize("role", ["narrator", "function", "System", None, 3])
def test_unknown_role(role: Any) -> None:
    body = {"messages": [{"role": "user", "content": "Hi"}, {"role": role, "content": "x"}]}
    assert _error(body).param == "messages[1].role"


def test_missing_role() -> None:
    assert _error({"messages": [{"content": "Hi"}]}).param == "messages[0].role"


@pytest.mark.parametrize(
    "body",
    [{}, {"messages": []}, {"messages": "Hi"}, {"messages": None}, {"messages": {"role": "user", "content": "Hi"}}],
)
def test_no_messages(body: dict[str, Any]) -> None:
    assert _error(body).param == "messages"


def test_message_that_is_not_an_object() -> None:
    assert _error({"messages": [{"role": "user", "content": "Hi"}, "Hi"]}).param == "messages[1]"


def test_body_that_is_not_an_object() -> None:
    with pytest.raises(ApiError) as info:
        repair_request([{"role": "user"}], RepairPolicy())  # type: ignore[arg-type]
    assert info.value.status == 400 and info.value.param is None


def test_only_tool_responses_in_user_messages_is_no_query() -> None:
    # The template's scan skips user messages that are a <tool_response> block.
    body = {"messages": [{"role": "user", "content": " <tool_response>\n-3 C\n</tool_response>\n"}]}
    assert _error(body).param == "messages"


def test_late_system_message_as_user_does_not_rescue_a_conversation_without_a_query() -> None:
    body = {"messages": [{"role": "assistant", "content": "Hi"}, {"role": "system", "content": "S"}]}
    assert _error(body, system_messages="merge").param == "messages"
    # under to_user the late instruction is itself a user message, so there is a query
    result = _repair(copy.deepcopy(body), system_messages="to_user")
    assert result.body["messages"][-1] == {"role": "user", "content": SYSTEM_AS_USER_PREFIX + "S"}


def test_tool_conversation_fields_are_preserved() -> None:
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
    calls = [{"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]
    body = {
        "model": "demo",
        "tools": tools,
        "messages": [
            {"role": "developer", "content": "Use tools."},
            {"role": "user", "content": "Weather?", "name": "ann"},
            {"role": "assistant", "content": None, "tool_calls": calls, "reasoning_content": "Need data."},
            {"role": "tool", "tool_call_id": "call_1", "name": "weather", "content": "-3 C"},
        ],
    }
    result = _repair(body)
    assert result.body["messages"] == [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather?", "name": "ann"},
        {"role": "assistant", "content": "", "tool_calls": calls, "reasoning_content": "Need data."},
        {"role": "tool", "tool_call_id": "call_1", "name": "weather", "content": "-3 C"},
    ]
    assert result.body["tools"] is tools  # shared, not copied
    assert result.body["messages"][1] is body["messages"][1]  # unchanged messages are reused
    assert result.body["messages"][2]["tool_calls"] is calls


def test_normalize_messages_matches_repair_request() -> None:
    for case in CASES:
        if case["expect_status"] == 200 and "upstream_messages" in case:
            messages = copy.deepcopy(case["input"]["messages"])
            assert normalize_messages(messages, RepairPolicy()) == case["upstream_messages"]
    compliant = [{"role": "user", "content": "Hi"}]
    assert normalize_messages(compliant) is compliant
    with pytest.raises(ApiError):
        normalize_messages([{"role": "narrator", "content": "x"}])


# --- thinking switch -------------------------------------------------------------------------


def test_top_level_thinking_moves_and_keeps_other_template_kwargs() -> None:
    body = {
        "enable_thinking": True,
        "chat_template_kwargs": {"add_vision_id": True},
        "messages": [{"role": "user", "content": "Hi"}],
    }
    result = _repair(body)
    assert result.body["chat_template_kwargs"] == {"add_vision_id": True, "enable_thinking": True}
    assert "enable_thinking" not in result.body
    assert body["chat_template_kwargs"] == {"add_vision_id": True}
    assert result.thinking is True


def test_explicit_template_kwargs_win_over_top_level_thinking() -> None:
    body = {
        "enable_thinking": True,
        "chat_template_kwargs": {"enable_thinking": False},
        "messages": [{"role": "user", "content": "Hi"}],
    }
    result = _repair(body)
    assert result.body["chat_template_kwargs"] == {"enable_thinking": False}
    assert "enable_thinking" not in result.body
    assert result.repairs == ["thinking_moved"]
    assert result.thinking is False


@pytest.mark.parametrize("default", [True, False])
def test_per_model_thinking_default_applies_only_when_the_client_said_nothing(default: bool) -> None:
    body = {"messages": [{"role": "user", "content": "Hi"}]}
    result = _repair(body, thinking_default=default)
    assert result.body["chat_template_kwargs"] == {"enable_thinking": default}
    assert result.repairs == ["thinking_default"]
    assert result.thinking is default
    said = [
        {"enable_thinking": not default},
        {"chat_template_kwargs": {"enable_thinking": not default}},
        {"reasoning_effort": "none" if default else "high"},
    ]
    for extra in said:
        result = _repair({**body, **extra}, thinking_default=default)
        assert result.thinking is (not default), extra
        assert "thinking_default" not in result.repairs


@pytest.mark.parametrize("default", [True, False])
def test_null_reasoning_effort_says_nothing(default: bool) -> None:
    """``reasoning_effort: null`` (what some clients send for "unset") keeps the model's default;
    it used to skip it, so a model configured ``thinking: false`` thought."""
    result = _repair(
        {"messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": None}, thinking_default=default
    )
    assert result.body["chat_template_kwargs"] == {"enable_thinking": default}
    assert result.thinking is default


def test_no_default_leaves_the_template_default() -> None:
    body = {"messages": [{"role": "user", "content": "Hi"}]}
    result = _repair(body)
    assert result.body is body and result.thinking is True


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"enable_thinking": "false"}, "enable_thinking"),
        ({"chat_template_kwargs": {"enable_thinking": "no"}}, "chat_template_kwargs.enable_thinking"),
        ({"chat_template_kwargs": ["enable_thinking"]}, "chat_template_kwargs"),
        ({"reasoning_effort": False}, "reasoning_effort"),
        ({"reasoning_effort": 5}, "reasoning_effort"),
    ],
)
def test_bad_thinking_switch(extra: dict[str, Any], param: str) -> None:
    assert _error({"messages": [{"role": "user", "content": "Hi"}], **extra}).param == param


# --- per-request draft length ----------------------------------------------------------------


def test_speculative_object_is_flattened_for_llama_server() -> None:
    body = {"messages": [{"role": "user", "content": "Hi"}], "speculative": {"n_max": 4, "n_min": 1}}
    result = _repair(body)
    assert result.repairs == ["speculative_flattened"]
    assert "speculative" not in result.body
    assert result.body["speculative.n_max"] == 4 and result.body["speculative.n_min"] == 1
    assert result.body["messages"] is body["messages"]
    assert body["speculative"] == {"n_max": 4, "n_min": 1}


def test_flat_speculative_fields_are_compliant() -> None:
    body = {"messages": [{"role": "user", "content": "Hi"}], "speculative.n_max": 0}
    assert _repair(body).body is body


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"speculative": {"n_max": -1}}, "speculative.n_max"),
        ({"speculative": {"n_max": 2.5}}, "speculative.n_max"),
        ({"speculative": {"n_max": "4"}}, "speculative.n_max"),
        ({"speculative": {"n_max": True}}, "speculative.n_max"),
        ({"speculative": {"n_min": None}}, "speculative.n_min"),
        ({"speculative": {"p_min": 0.5}}, "speculative.p_min"),
        ({"speculative": 4}, "speculative"),
        ({"speculative": {"n_max": 2, "n_min": 3}}, "speculative.n_min"),
        ({"speculative": {"n_max": 2}, "speculative.n_max": 3}, "speculative.n_max"),
        ({"speculative.n_max": -2}, "speculative.n_max"),
    ],
)
def test_bad_draft_length(extra: dict[str, Any], param: str) -> None:
    assert _error({"messages": [{"role": "user", "content": "Hi"}], **extra}).param == param


# --- the compliant request -------------------------------------------------------------------


def test_compliant_request_with_everything_is_the_same_object() -> None:
    calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    body = {
        "model": "demo",
        "stream": True,
        "temperature": 0,
        "n": 1,
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "chat_template_kwargs": {"enable_thinking": False},
        "speculative.n_max": 4,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "", "tool_calls": calls, "reasoning_content": "r"},
            {"role": "tool", "tool_call_id": "c", "content": ""},
            {"role": "user", "content": ""},
        ],
    }
    pristine = copy.deepcopy(body)
    result = _repair(body, multimodal=True, thinking_default=True)
    assert result.body is body and result.changed is False and result.repairs == []
    assert result.thinking is False
    assert body == pristine


# --- against the real template ---------------------------------------------------------------


class TemplateError(Exception):
    """``raise_exception(...)`` inside the chat template."""


def _template() -> Any:
    """The pinned Qwen3.5 template, rendered with jinja2 (a llama-cpp-python dependency) the way
    llama-cpp-python renders chat templates."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from orchestrator.native.build import pinned_source

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string((pinned_source() / "models/templates/Qwen3.5-4B.jinja").read_text())


def _render(template: Any, body: dict[str, Any]) -> str:
    messages = copy.deepcopy(body["messages"])
    for message in messages:  # llama-server hands the template parsed tool-call arguments
        for call in message.get("tool_calls") or []:
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    kwargs = body.get("chat_template_kwargs", {})
    return str(template.render(messages=messages, tools=body.get("tools"), add_generation_prompt=True, **kwargs))


def test_repaired_cases_render_with_the_pinned_template() -> None:
    template = _template()
    expected_raw_errors = {
        "C01": "System message must be at the beginning.",
        "C02": "System message must be at the beginning.",
        "C03": "Unexpected message role.",
        "C04": "Unexpected message role.",
        "C07": "No user query found in messages.",
    }
    for case in CASES:
        raw_error = None
        try:
            _render(template, case["input"])
        except TemplateError as err:
            raw_error = str(err)
        assert raw_error == expected_raw_errors.get(case["id"]), case["id"]
        if case["expect_status"] == 200:
            prompt = _render(template, _repair(copy.deepcopy(case["input"])).body)
            assert prompt.endswith(
                "<|im_start|>assistant\n" + ("<think>\n\n</think>\n\n" if case["id"] == "C08" else "<think>\n")
            ), case["id"]
    c01 = next(c for c in CASES if c["id"] == "C01")
    assert _render(template, _repair(copy.deepcopy(c01["input"]), system_messages="merge").body).startswith(
        "<|im_start|>system\nAnswer in one sentence.<|im_end|>\n<|im_start|>user\nPlan a picnic."
    )
    # in place (the default): everything before the late message renders exactly as it does without
    # it, so a prompt cache of the conversation so far still applies
    without = {"messages": [m for m in c01["input"]["messages"] if m["role"] != "system"]}
    earlier = _render(template, _repair(without).body).split("<|im_start|>user\nIn a park.")[0]
    assert _render(template, _repair(copy.deepcopy(c01["input"])).body).startswith(
        earlier + "<|im_start|>user\n<system-reminder>\nAnswer in one sentence.\n</system-reminder><|im_end|>"
    )


def test_joined_text_parts_render_exactly_like_the_list() -> None:
    template = _template()
    messages = [
        {"role": "system", "content": [{"type": "text", "text": " Be "}, {"type": "text", "text": "brief. "}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Hello"},
                {"type": "text", "text": " world"},
                {"type": "text", "text": "\nagain\n"},
            ],
        },
    ]
    joined = normalize_messages(messages)
    assert _render(template, {"messages": joined}) == _render(template, {"messages": messages})
    assert "Hello world\nagain<|im_end|>" in _render(template, {"messages": joined})


def test_speculative_n_max_beyond_int32_is_a_400_on_its_param() -> None:
    # llama-server reads it as int32: 10**30 came back as "got -2147483648"
    body = {"messages": [{"role": "user", "content": "u"}], "speculative": {"n_max": 10**30}}
    with pytest.raises(ApiError) as info:
        repair_request(body, RepairPolicy())
    assert info.value.status == 400 and info.value.param == "speculative.n_max"
    assert "at most 2147483647" in str(info.value)
    ok = repair_request(
        {"messages": [{"role": "user", "content": "u"}], "speculative": {"n_max": 2**31 - 1}}, RepairPolicy()
    )
    assert ok.body["speculative.n_max"] == 2**31 - 1
