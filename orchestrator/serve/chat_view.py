"""The chat request llama-server makes of a repaired Anthropic or Responses body, for rendering in-process.

Pure functions, no I/O. llama-server turns ``/v1/messages`` and ``/v1/responses`` bodies into a chat
request before it renders the template (``server_chat_convert_anthropic_to_oai`` and
``server_chat_convert_responses_to_chatcmpl`` in ``tools/server/server-chat.cpp``). These functions
do the same for the bodies our repair sends (``anthropic.repair_request``,
``responses.repair_request``), so the prompt of any API can be rendered and tokenized in-process
(``orchestrator.serve.prompt_prefix``): for routing a request to the slot holding its prefix, and
for the tests that turn N+1 of a recorded agent session starts with turn N's tokens.
:func:`template_messages` then does what llama-server does before the template sees a chat request:
tool-call ``arguments`` strings become objects.
"""

from __future__ import annotations

import json
from typing import Any


def _text_parts(content: Any) -> Any:
    if not isinstance(content, list):
        return content
    return [
        {"type": "text", "text": p.get("text", "")} if p.get("type") in ("text", "input_text") else p for p in content
    ]


def anthropic_chat(body: dict[str, Any]) -> dict[str, Any]:
    """``{"messages", "tools", "chat_template_kwargs"}`` of a repaired Anthropic body."""
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if isinstance(system, str):
        messages.append({"role": "system", "content": system})
    elif isinstance(system, list):
        messages.append({"role": "system", "content": "".join(b.get("text", "") for b in system)})
    for msg in body.get("messages") or []:
        content = msg.get("content")
        if not isinstance(content, list):
            messages.append(msg)
            continue
        parts, calls, results, reasoning = [], [], [], ""
        for block in content:
            btype = block.get("type")
            if btype == "text":
                parts.append({"type": "text", "text": block.get("text", "")})
            elif btype == "thinking":
                reasoning += block.get("thinking", "")
            elif btype == "tool_use":
                args = json.dumps(block.get("input", {}), separators=(",", ":"))
                calls.append(
                    {
                        "id": block.get("id", ""),
                        "type": "function",
                        "function": {"name": block["name"], "arguments": args},
                    }
                )
            elif btype == "tool_result":
                results.append(
                    {"role": "tool", "tool_call_id": block.get("tool_use_id", ""), "content": _result_text(block)}
                )
        if parts or calls or reasoning:
            new: dict[str, Any] = {"role": msg["role"], "content": parts or ""}
            if calls:
                new["tool_calls"] = calls
            if reasoning:
                new["reasoning_content"] = reasoning
            messages.append(new)
        messages.extend(results)
    tools = [
        {"type": "function", "function": {"name": t.get("name", ""), "description": t.get("description", ""),
                                          "parameters": t.get("input_schema", {})}}
        for t in body.get("tools") or []
    ]  # fmt: skip
    return {"messages": messages, "tools": tools or None, "chat_template_kwargs": body.get("chat_template_kwargs")}


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _result_text(block: dict[str, Any]) -> Any:
    content = block.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(c.get("text", "") for c in content if c.get("type") == "text")
    return ""


def responses_chat(body: dict[str, Any]) -> dict[str, Any]:
    """``{"messages", "tools", "chat_template_kwargs"}`` of a repaired Responses body."""
    messages: list[dict[str, Any]] = []
    if "instructions" in body:
        messages.append({"role": "system", "content": body.get("instructions") or ""})
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    for item in items or []:
        merge = bool(messages) and messages[-1].get("role") == "assistant"
        itype = item.get("type")
        if itype == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            if merge:
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "tool_calls": [call]})
        elif itype == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": _text_parts(item["output"])})
        elif itype == "reasoning":
            if merge:
                messages[-1]["reasoning_content"] = item["content"][0]["text"]
            else:
                messages.append({"role": "assistant", "content": [], "reasoning_content": item["content"][0]["text"]})
        else:
            content = item.get("content")
            parts = [{"type": "text", "text": content}] if isinstance(content, str) else _text_parts(content)
            if item.get("role") == "assistant" and merge:
                messages[-1]["content"] = [*(messages[-1].get("content") or []), *parts]
            else:
                messages.append({"role": item.get("role"), "content": parts})
    tools = [
        {"type": "function", "function": {k: v for k, v in t.items() if k != "type"}} for t in body.get("tools") or []
    ]
    return {"messages": messages, "tools": tools or None, "chat_template_kwargs": body.get("chat_template_kwargs")}


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` as llama-server hands them to the template: tool-call arguments parsed into
    objects (a string that is not a JSON object is kept as it is)."""
    out = []
    for msg in messages:
        calls = msg.get("tool_calls")
        if not calls:
            out.append(msg)
            continue
        parsed = []
        for call in calls:
            fn = dict(call.get("function") or {})
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except (TypeError, ValueError):
                args = fn.get("arguments")
            parsed.append({**call, "function": {**fn, "arguments": args}})
        out.append({**msg, "tool_calls": parsed})
    return out
