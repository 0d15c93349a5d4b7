"""What agents act on, through the proxy against a real llama-server: context overflow in each API's
shape, malformed tool-call arguments in history, a Responses answer cut by the server's limit, and
models that tell their size."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import Stack, real_stack

pytestmark = [pytest.mark.native, pytest.mark.slow]

CTX = 4096  # 2 slots of 2048 tokens
LONG = "word " * 3000  # about 3,000 tokens: more than a slot holds


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    models = [
        {"name": "demo", "parallel": 2, "ctx_size": CTX, "thinking": False, "threads": 1, "extra_args": ["-n", "6"]}
    ]
    s = real_stack(tmp_path_factory.mktemp("agent-errors"), echo_model, bin_info, models=models)
    yield s
    s.close()


def post(stack: Stack, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(stack.url + path, json={"model": "demo", **body}, timeout=120)


@pytest.mark.parametrize("stream", [False, True])
def test_overflow_says_context_length_exceeded_in_every_api(stack: Stack, stream: bool) -> None:
    too_long = "prompt is too long: "
    for path, body in (
        ("/v1/chat/completions", {"max_tokens": 4, "messages": [{"role": "user", "content": LONG}]}),
        ("/v1/responses", {"max_output_tokens": 4, "input": LONG}),
    ):
        r = post(stack, path, {**body, "stream": stream})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["code"] == "context_length_exceeded" and err["type"] == "invalid_request_error", err
        assert err["message"].startswith(too_long) and "> 2048 maximum" in err["message"], err
    r = post(
        stack, "/v1/messages", {"max_tokens": 4, "stream": stream, "messages": [{"role": "user", "content": LONG}]}
    )
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith(too_long) and "tokens > 2048 maximum" in body["error"]["message"]


def _chat_with_call(arguments: str) -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    return {"max_tokens": 4, "messages": messages, "tools": [tool]}


def _responses_with_call(arguments: str) -> dict[str, Any]:
    items = [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": arguments},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]
    tool = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
    return {"max_output_tokens": 4, "input": items, "tools": [tool]}


@pytest.mark.parametrize("arguments", ["{", "not json", "[1]"])
def test_malformed_history_arguments_are_a_400_naming_them(stack: Stack, arguments: str) -> None:
    """llama-server answered 500 (a 502 here) for these, which clients retry forever."""
    r = post(stack, "/v1/chat/completions", _chat_with_call(arguments))
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[1].tool_calls[0].function.arguments"
    r = post(stack, "/v1/responses", _responses_with_call(arguments))
    assert r.status_code == 400 and r.json()["error"]["param"] == "input[1].arguments"


def test_empty_history_arguments_are_an_empty_call(stack: Stack) -> None:
    assert post(stack, "/v1/chat/completions", _chat_with_call("")).status_code == 200
    assert post(stack, "/v1/responses", _responses_with_call("")).status_code == 200


def test_responses_cut_by_the_server_limit_are_incomplete(stack: Stack) -> None:
    """No max_output_tokens (as Codex sends): the server's -n 6 cuts the answer."""
    for stream in (False, True):
        r = post(stack, "/v1/responses", {"input": "Say hello", "stream": stream})
        assert r.status_code == 200
        if stream:
            last = [ln for ln in r.text.splitlines() if ln.startswith("data: ")][-1]
            response = httpx.Response(200, content=last[6:]).json()["response"]
        else:
            response = r.json()
        assert response["status"] == "incomplete", response
        assert response["incomplete_details"] == {"reason": "max_output_tokens"}


def test_models_tell_their_context_and_capabilities(stack: Stack) -> None:
    entry = httpx.get(stack.url + "/v1/models", timeout=30).json()["data"][0]
    assert entry["context_length"] == CTX // 2 and entry["max_input_tokens"] == CTX // 2
    assert entry["capabilities"] == {"tools": True, "vision": False, "thinking": True, "embeddings": False}
    show = httpx.post(stack.url + "/api/show", json={"model": "demo"}, timeout=30).json()
    assert show["model_info"]["qwen35moe.context_length"] == CTX // 2 and "tools" in show["capabilities"]
    assert show["parameters"] == f"num_ctx {CTX // 2}"


def test_every_replayed_codex_item_is_accepted(stack: Stack) -> None:
    """A second turn as Codex and the SDKs replay it: each of these items was a 400/500 before."""
    items = [
        {"role": "user", "content": "Fix the build."},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Look at the log."}]},
        {"type": "reasoning", "summary": [], "encrypted_content": "gAAAAB-opaque"},
        {"type": "function_call", "call_id": "c1", "name": "list_agents", "namespace": "multi_agent_v1",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "output_text", "text": "none"}]},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "Done."},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "x"}},
        {"type": "compaction", "encrypted_content": "gAAAA-opaque"},
        {"type": "item_reference", "id": "msg_1"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Patched."}]},
        {"role": "user", "content": "Thanks. Anything else?"},
    ]  # fmt: skip
    tools = [
        {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.",
         "tools": [{"type": "function", "name": "list_agents", "parameters": {"type": "object", "properties": {}}}]},
        {"type": "custom", "name": "apply_patch", "description": "Patch files."},
        {"type": "web_search"},
    ]  # fmt: skip
    r = post(stack, "/v1/responses", {"input": items, "tools": tools, "max_output_tokens": 4})
    assert r.status_code == 200, r.text


def test_codex_tool_choices_and_efforts_through_the_endpoint(stack: Stack) -> None:
    """A choice naming a namespaced tool is forced as mapped; unknown tools and efforts are a 400."""
    tools = [
        {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.",
         "tools": [{"type": "function", "name": "list_agents", "parameters": {"type": "object", "properties": {}}}]},
        {"type": "web_search"},
    ]  # fmt: skip
    body = {"input": "Who is there?", "tools": tools, "max_output_tokens": 4}
    named = {"type": "function", "name": "list_agents", "namespace": "multi_agent_v1"}
    for choice in (named, {"type": "web_search"}):
        r = post(stack, "/v1/responses", {**body, "tool_choice": choice})
        assert r.status_code == 200, r.text
    r = post(stack, "/v1/responses", {**body, "tool_choice": {"type": "function", "name": "list_agents"}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"
    r = post(stack, "/v1/responses", {**body, "reasoning": {"effort": "ultra"}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "reasoning.effort"
    chat = {"messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": "ultra", "max_tokens": 4}
    r = post(stack, "/v1/chat/completions", chat)
    assert r.status_code == 400 and r.json()["error"]["param"] == "reasoning_effort"
