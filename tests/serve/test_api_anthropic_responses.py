"""Anthropic Messages and OpenAI Responses through the proxy, against a real llama-server.

Clients are the official ``anthropic`` SDK and the ``openai`` SDK's Responses API, streamed and
not; the recording tap shows the exact body that reached llama-server. The stack has an API key
(``K1``) and the model's thinking default is off, so the tests see the key check and the
thinking mapping on every route.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from proxy_harness import Stack, real_stack

pytestmark = [pytest.mark.native, pytest.mark.slow]

KEY = "K1"
TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    models = [{"name": "demo", "aliases": ["tiny"], "parallel": 2, "ctx_size": 8192, "thinking": False, "threads": 1}]
    s = real_stack(tmp_path_factory.mktemp("apis"), echo_model, bin_info, server={"api_keys": [KEY]}, models=models)
    yield s
    s.close()


@pytest.fixture
def rec(stack: Stack) -> Any:
    stack.recorder.clear()
    return stack.recorder


def claude(stack: Stack, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stack.url, api_key=key, max_retries=0, timeout=60)


def oai(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.url + "/v1", api_key=KEY, max_retries=0, timeout=60)


def completion_tokens(stack: Stack) -> float:
    for line in httpx.get(stack.url + "/metrics").text.splitlines():
        if line.startswith('orchestrator_completion_tokens_total{model="demo"} '):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def agent_messages() -> list[dict[str, Any]]:
    """An agent's conversation: a system reminder inside a user turn, a tool use and its result."""
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<system-reminder>Today is Monday.</system-reminder>"},
                {"type": "text", "text": "Read README.md and summarise it."},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I should read the file.", "signature": ""},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "README.md"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "# Demo"}]},
                {"type": "text", "text": "<system-reminder>Be brief.</system-reminder>"},
            ],
        },
    ]


AGENT_SYSTEM = [
    {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=a5145;"},
    {"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}},
]


def test_anthropic_sdk_message_and_usage(stack: Stack, rec: Any) -> None:
    """A06: type message, usage with input and output tokens; x-api-key accepted; thinking default off."""
    msg = claude(stack).messages.create(
        model="demo", max_tokens=8, messages=[{"role": "user", "content": "U1"}], extra_body={"temperature": 0}
    )
    assert msg.type == "message" and msg.role == "assistant"
    assert msg.id.startswith("msg_") and "chatcmpl" not in msg.id  # llama-server says chatcmpl-...
    assert msg.usage.input_tokens > 0 and 0 < msg.usage.output_tokens <= 8
    assert [b.type for b in msg.content] == ["text"]  # thinking default off: an answer, not a thinking block
    [sent] = rec.bodies("/v1/messages")
    assert sent["chat_template_kwargs"] == {"enable_thinking": False}


def test_anthropic_sdk_stream_events(stack: Stack) -> None:
    """A06: the first event is message_start, the last message_stop; the text equals the non-streamed one."""
    client = claude(stack)
    body: dict[str, Any] = {
        "model": "demo",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "U1"}],
        "extra_body": {"temperature": 0},
    }
    whole = client.messages.create(**body)
    with client.messages.stream(**body) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert events[0].type == "message_start" and events[-1].type == "message_stop"
    assert events[0].message.id.startswith("msg_") and "chatcmpl" not in events[0].message.id
    assert final.id == events[0].message.id
    assert final.content[0].text == whole.content[0].text  # type: ignore[union-attr]
    assert final.usage.output_tokens == whole.usage.output_tokens
    # no timings in Anthropic streams: the tokens are counted from the last event's usage
    before = completion_tokens(stack)
    with client.messages.stream(**body) as stream:
        stream.until_done()
    assert completion_tokens(stack) == before + whole.usage.output_tokens


def test_anthropic_count_tokens_and_agent_turn(stack: Stack, rec: Any) -> None:
    """count_tokens 200; an agent-shaped request (system blocks, reminders, tool use, thinking on) renders."""
    client = claude(stack)
    count = client.messages.count_tokens(model="demo", system=AGENT_SYSTEM, messages=agent_messages(), tools=TOOLS)
    assert count.input_tokens > 20
    msg = client.messages.create(
        model="demo",
        max_tokens=16,
        system=AGENT_SYSTEM,
        messages=agent_messages(),
        tools=TOOLS,
        thinking={"type": "enabled", "budget_tokens": 1024},
    )
    assert msg.stop_reason in ("max_tokens", "end_turn", "tool_use")
    sent = rec.bodies("/v1/messages")[-1]
    # the per-request billing header is dropped (its cch= hash would bust the prompt cache), thinking mapped on
    assert sent["system"] == AGENT_SYSTEM[1]["text"]
    assert sent["chat_template_kwargs"] == {"enable_thinking": True}
    # the last user turn's tool result goes first, right after its call; the reminder text after it
    *head, last = agent_messages()
    assert sent["messages"] == [
        *head,
        {**last, "content": last["content"][:1]},
        {**last, "content": last["content"][1:]},
    ]
    with client.messages.stream(
        model="demo", max_tokens=16, system=AGENT_SYSTEM, messages=agent_messages(), tools=TOOLS
    ) as stream:
        assert stream.get_final_message().type == "message"


def test_anthropic_errors_use_anthropic_shape(stack: Stack, rec: Any) -> None:
    """401, 404 and a template-breaking role come back as Anthropic errors, and the SDK maps them."""
    with pytest.raises(anthropic.AuthenticationError) as auth:
        claude(stack, key="wrong").messages.create(
            model="demo", max_tokens=4, messages=[{"role": "user", "content": "U1"}]
        )
    assert auth.value.body == {"type": "error", "error": {"type": "authentication_error", "message": "invalid API key"}}
    with pytest.raises(anthropic.NotFoundError) as missing:
        claude(stack).messages.create(model="nope", max_tokens=4, messages=[{"role": "user", "content": "U1"}])
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    r = httpx.post(
        stack.url + "/v1/messages",
        headers={"x-api-key": KEY},
        json={"model": "demo", "max_tokens": 4, "messages": [{"role": "tool", "content": "U1"}]},
    )
    assert r.status_code == 400
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"
    assert "messages[0].role" in r.json()["error"]["message"]
    # only tool results, no user text: the template would raise; a 400, never a 500/502
    turn = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]}]
    r = httpx.post(stack.url + "/v1/messages", headers={"x-api-key": KEY}, json={"model": "demo", "messages": turn})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert rec.bodies("/v1/messages") == []


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"tools": "read_file"}, "tools"),
        ({"tools": [{"name": "read_file", "description": "Read a file"}]}, "tools[0].input_schema"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].input_schema"),
        ({"tools": TOOLS, "tool_choice": {"type": "tool"}}, "tool_choice.name"),
        ({"tool_choice": {"type": "tool"}}, "tool_choice.name"),
        ({"tool_choice": {"type": "tool", "name": "read_file"}}, "tool_choice.name"),
        ({"tools": TOOLS, "tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
    ],
)
def test_anthropic_refuses_malformed_tools(stack: Stack, rec: Any, extra: dict[str, Any], field: str) -> None:
    """Malformed tools or tool_choice: a 400 in Anthropic's shape naming the field (llama-server answers 200)."""
    body = {"model": "demo", "max_tokens": 4, "messages": [{"role": "user", "content": "U1"}], **extra}
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = httpx.post(stack.url + path, headers={"x-api-key": KEY}, json=body)
        assert r.status_code == 400, r.text
        assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"
        assert field in r.json()["error"]["message"]
    assert rec.requests == []


def test_responses_sdk_plain_and_stream(stack: Stack, rec: Any) -> None:
    """A05: object response with an output list; the stream's last event is response.completed."""
    client = oai(stack)
    resp = client.responses.create(model="demo", input="U1", max_output_tokens=8, temperature=0)
    assert resp.object == "response" and isinstance(resp.output, list) and resp.output
    assert resp.usage is not None and 0 < resp.usage.output_tokens <= 8
    assert rec.bodies("/v1/responses")[0]["chat_template_kwargs"] == {"enable_thinking": False}
    events = list(client.responses.create(model="demo", input="U1", max_output_tokens=8, temperature=0, stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert events[-1].response.output_text == resp.output_text  # type: ignore[union-attr]
    # the raw stream ends with that event: no OpenAI-chat "[DONE]" is added to a Responses stream
    raw = httpx.post(
        stack.url + "/v1/responses",
        headers={"authorization": f"Bearer {KEY}"},
        json={"model": "demo", "input": "U1", "max_output_tokens": 4, "stream": True},
    )
    assert raw.text.rstrip().split("\n\n")[-1].startswith("event: response.completed")
    count = client.responses.input_tokens.count(model="demo", input="U1")
    assert count.input_tokens > 0


def test_responses_agent_turn_and_system_items(stack: Stack, rec: Any) -> None:
    """Instructions plus developer items (a 500 at llama-server) render; tool calls and outputs pass."""
    items: list[Any] = [
        {"role": "developer", "content": "Follow the repo rules."},
        {"role": "user", "content": [{"type": "input_text", "text": "<system-reminder>x</system-reminder> Fix it."}]},
        {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": '{"cmd": "ls"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "README.md"},
        {"role": "developer", "content": "Be brief."},
    ]
    tools = [{"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {}}}]
    resp = oai(stack).responses.create(
        model="demo",
        instructions="You are Codex.",
        input=items,
        tools=tools,  # type: ignore[arg-type]
        reasoning={"effort": "low"},
        max_output_tokens=8,
        store=False,
    )
    assert resp.usage is not None  # rendered and answered; cut at 8 tokens it is incomplete
    assert resp.status == ("incomplete" if resp.usage.output_tokens == 8 else "completed")
    sent = rec.bodies("/v1/responses")[-1]
    # the leading developer item joins the instructions; the late one stays where it stands
    assert sent["instructions"] == "You are Codex.\n\nFollow the repo rules."
    assert [i.get("role") for i in sent["input"]] == ["user", None, None, "user"]
    assert sent["input"][-1]["content"] == [
        {"type": "input_text", "text": "<system-reminder>\nBe brief.\n</system-reminder>"}
    ]
    assert "chat_template_kwargs" not in sent  # reasoning.effort given: no default added


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"background": True}, "background"),
        ({"include": ["message.output_text.logprobs"]}, "include"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
        ({"tools": [{"type": "namespace", "name": "ns"}]}, "tools[0].tools"),
        ({"tools": [{"type": "function", "name": "f", "parameters": {}}, {"name": "g"}]}, "tools[1].type"),
        ({"extra_body": {"instructions": 5}}, "instructions"),
        ({"extra_body": {"text": "json"}}, "text"),
        ({"extra_body": {"reasoning": "high"}}, "reasoning"),
    ],
)
def test_responses_refuses_what_it_cannot_keep(stack: Stack, rec: Any, extra: dict[str, Any], param: str) -> None:
    """State llama-server cannot keep, and unfillable fields: a 400 naming the field, never ignored."""
    with pytest.raises(openai.BadRequestError) as err:
        oai(stack).responses.create(model="demo", input="U1", max_output_tokens=4, **extra)
    assert err.value.body["param"] == param  # type: ignore[index]
    assert rec.requests == []


def test_responses_text_format_constrains_output(stack: Stack, rec: Any) -> None:
    """text.format json_schema is mapped to response_format, so the output is JSON of that schema."""
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    resp = oai(stack).responses.create(
        model="demo",
        input="Answer yes or no.",
        max_output_tokens=128,
        temperature=0,  # greedy: the same JSON every run (sampled, the echo model may pad with whitespace past the cap)
        text={"format": {"type": "json_schema", "name": "yn", "schema": schema, "strict": True}},
    )
    assert json.loads(resp.output_text)["answer"] in ("yes", "no")
    assert rec.bodies("/v1/responses")[0]["response_format"]["json_schema"]["schema"] == schema


def test_both_sdks_list_models(stack: Stack) -> None:
    assert [m.id for m in claude(stack).models.list()] == ["demo", "tiny"]
    assert claude(stack).models.retrieve("tiny").display_name == "tiny"
    assert [m.id for m in oai(stack).models.list()] == ["demo", "tiny"]


def test_unknown_stored_responses_are_a_clear_404(stack: Stack) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        oai(stack).responses.retrieve("resp_1")
    assert err.value.body["code"] == "response_not_found"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        oai(stack).responses.cancel("resp_1")
    with pytest.raises(openai.NotFoundError) as err:
        oai(stack).responses.create(model="demo", input="U2", previous_response_id="resp_1", max_output_tokens=4)
    assert err.value.body["param"] == "previous_response_id"  # type: ignore[index]
    count = oai(stack).responses.input_tokens.count(model="demo", input="U1")  # the real sub-route still wins
    assert count.input_tokens > 0


def repairs(stack: Stack, kind: str) -> float:
    for line in httpx.get(stack.url + "/metrics").text.splitlines():
        if line.startswith("orchestrator_repairs_total{") and f'kind="{kind}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_anthropic_stop_sequence_is_the_stop_reason(stack: Stack) -> None:
    """An answer ended by a stop sequence says ``stop_reason: stop_sequence``, whole and streamed
    (llama-server says ``end_turn``, which reads as a finished turn)."""
    client = claude(stack)
    body: dict[str, Any] = {
        "model": "demo",
        "max_tokens": 12,
        "messages": [{"role": "user", "content": "alpha bravo charlie delta echo foxtrot"}],
        "extra_body": {"temperature": 0},
    }
    free = client.messages.create(**body).content[0].text  # type: ignore[union-attr]
    stop = free.strip()[4:7]  # three characters from inside the answer
    assert len(stop) == 3 and stop.strip() == stop, free
    before = repairs(stack, "anthropic_stop_sequence")
    whole = client.messages.create(**body, stop_sequences=[stop])
    assert (whole.stop_reason, whole.stop_sequence) == ("stop_sequence", stop)
    with client.messages.stream(**body, stop_sequences=[stop]) as stream:
        streamed = stream.get_final_message()
    assert (streamed.stop_reason, streamed.stop_sequence) == ("stop_sequence", stop)
    assert repairs(stack, "anthropic_stop_sequence") == before + 2
    cut = client.messages.create(**{**body, "max_tokens": 2}, stop_sequences=["\x00never"])
    assert (cut.stop_reason, cut.stop_sequence) == ("max_tokens", None)  # untouched


def test_responses_cut_by_max_output_tokens_is_incomplete(stack: Stack) -> None:
    """An answer that used all of ``max_output_tokens`` is ``status: incomplete`` with the reason,
    whole and streamed (llama-server says ``completed``)."""
    client = oai(stack)
    resp = client.responses.create(model="demo", input="U1 U2 U3", max_output_tokens=3, temperature=0)
    assert resp.usage is not None and resp.usage.output_tokens == 3
    assert resp.status == "incomplete"
    assert resp.incomplete_details is not None and resp.incomplete_details.reason == "max_output_tokens"
    with client.responses.stream(model="demo", input="U1 U2 U3", max_output_tokens=3, temperature=0) as stream:
        final = stream.get_final_response()
    assert final.status == "incomplete" and final.output_text == resp.output_text
    assert final.incomplete_details is not None and final.incomplete_details.reason == "max_output_tokens"
    # every event numbered, every text event indexed (llama-server sends neither; the SDK needs both)
    raw = httpx.post(
        stack.url + "/v1/responses",
        headers={"authorization": f"Bearer {KEY}"},
        json={"model": "demo", "input": "U1", "max_output_tokens": 3, "stream": True},
    )
    events = [json.loads(e.split("data: ", 1)[1]) for e in raw.text.strip().split("\n\n")]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert deltas and all((e["output_index"], e["content_index"]) == (0, 0) for e in deltas)
    roomy = client.responses.create(model="demo", input="U1", max_output_tokens=4000, temperature=0)
    assert roomy.usage is not None
    if roomy.usage.output_tokens < 4000:
        assert roomy.status == "completed" and roomy.incomplete_details is None


def _input_tokens(stack: Stack, items: list[dict[str, Any]]) -> int:
    r = httpx.post(
        stack.url + "/v1/responses/input_tokens",
        json={"model": "demo", "instructions": "S0", "input": items},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    assert r.status_code == 200, r.text
    return int(r.json()["input_tokens"])


@pytest.mark.parametrize("stream", [False, True])
def test_a_compaction_trigger_is_answered_with_one_compaction_item(stack: Stack, rec: Any, stream: bool) -> None:
    """Codex's ``remote_compaction_v2``: a ``compaction_trigger`` item at the end of the input asks
    for the compaction; the model writes the summary (thinking off) and the answer is one
    ``compaction`` item, whole or as a stream of the response's life; a later request replaying the
    item has the summary in its prompt (it counts the same tokens as the summary written out)."""
    history = [{"role": "user", "content": "Fix the failing test"}, {"role": "assistant", "content": "Done."}]
    body = {"model": "demo", "instructions": "S0", "max_output_tokens": 12, "stream": stream, "store": True}
    body["input"] = [*history, {"type": "compaction_trigger"}]
    headers = {"Authorization": f"Bearer {KEY}"}
    if stream:
        with httpx.stream("POST", stack.url + "/v1/responses", json=body, headers=headers, timeout=60) as r:
            assert r.status_code == 200
            events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
        kinds = [e["type"] for e in events]
        assert kinds == [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.output_item.done",
            "response.completed",
        ], kinds
        response = events[-1]["response"]
    else:
        r = httpx.post(stack.url + "/v1/responses", json=body, headers=headers, timeout=60)
        assert r.status_code == 200, r.text
        response = r.json()
    assert response["status"] == "incomplete"  # the echo model never stops: max_output_tokens cut the summary
    stored = httpx.get(f"{stack.url}/v1/responses/{response['id']}", headers=headers, timeout=30)
    assert stored.status_code == 404, stored.text  # a summary is no turn of the conversation: never stored
    (item,) = response["output"]
    assert item["type"] == "compaction" and item["encrypted_content"]
    sent = rec.bodies("/v1/responses")[-1]
    assert "Summarize the conversation" in json.dumps(sent["input"][-1])
    assert "compaction_trigger" not in json.dumps(sent)
    summary = json.loads(base64.urlsafe_b64decode(item["encrypted_content"].split(":", 1)[1]))["summary"]
    assert summary  # the model's words (thinking off: the answer is text)
    written = {"role": "user", "content": f"<conversation_summary>\n{summary}\n</conversation_summary>"}
    later = {"role": "user", "content": "Now run it"}
    assert _input_tokens(stack, [item, later]) == _input_tokens(stack, [written, later])
    assert _input_tokens(stack, [item, later]) > _input_tokens(stack, [later]) + 3


SEARCH_TOOLS = [
    {"name": "Bash", "description": "Run a command", "input_schema": {"type": "object", "properties": {}}},
    {
        "name": "mcp__srv__get_x",
        "description": "Get x for a city",
        "defer_loading": True,
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
    {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"},
]


def test_claude_code_tool_search_is_served_and_keeps_the_prompt(stack: Stack, rec: Any) -> None:
    """Claude Code's tool search (``defer_loading`` tools and the regex search server tool): a 200
    where the server tool was a 400; the model sees every tool at the top from the first turn, the
    search's ``tool_reference`` result is text, and the turn after the search processes only its
    new tokens (+ 64), since the tools block never changes."""
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "advanced-tool-use-2025-11-20"}
    first = [{"role": "user", "content": "What is x in Paris?"}]
    call = {"type": "tool_use", "id": "toolu_1", "name": "tool_search_tool_regex", "input": {"pattern": "get_x"}}
    found = [{"type": "tool_reference", "tool_name": "mcp__srv__get_x"}]
    search = [
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": found}]},
    ]
    usage = []
    for messages in (first, first + search):
        body = {"model": "demo", "max_tokens": 8, "tools": SEARCH_TOOLS, "messages": messages}
        r = httpx.post(stack.url + "/v1/messages", json=body, headers=headers, timeout=60)
        assert r.status_code == 200, r.text
        usage.append(r.json()["usage"])
    sent = rec.bodies("/v1/messages")[-1]
    assert [t["name"] for t in sent["tools"]] == ["Bash", "mcp__srv__get_x"]  # the deferred tool, from turn 1
    result = sent["messages"][-1]["content"][0]["content"]
    assert result[0]["type"] == "text" and "mcp__srv__get_x" in result[0]["text"]
    before = usage[0]["input_tokens"] + usage[0]["cache_read_input_tokens"] + usage[0]["output_tokens"]
    total = usage[1]["input_tokens"] + usage[1]["cache_read_input_tokens"]
    assert usage[1]["input_tokens"] <= max(0, total - before) + 64, usage
