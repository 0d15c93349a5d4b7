"""The chat request llama-server makes of a repaired Anthropic Messages body, for rendering in-process.

Pure, no I/O: what ``server_chat_convert_anthropic_to_oai`` (``tools/server/server-chat.cpp``) does
before the template sees the body, so the prompt can be rendered and tokenized here
(``orchestrator.serve.cache.prefix``): for routing a request to the slot holding its prefix, and for
the tests that turn N+1 of a recorded agent session starts with turn N's tokens.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.serve.anthropic.tool_changes import oai_tool


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
    # the prompt shows render_tools when the conversation changed its tools (native patch 0010)
    shown = body.get("render_tools")
    tools = shown if isinstance(shown, list) else [oai_tool(t) for t in body.get("tools") or []]
    return {"messages": messages, "tools": tools or None, "chat_template_kwargs": body.get("chat_template_kwargs")}


def _result_text(block: dict[str, Any]) -> Any:
    content = block.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(c.get("text", "") for c in content if c.get("type") == "text")
    return ""
