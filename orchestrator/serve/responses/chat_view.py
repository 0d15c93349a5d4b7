"""The chat request llama-server makes of a repaired Responses body, for rendering in-process.

Pure, no I/O: what ``server_chat_convert_responses_to_chatcmpl`` (``tools/server/server-chat.cpp``)
does before the template sees the body (see ``orchestrator.serve.anthropic.chat_view``).
"""

from __future__ import annotations

from typing import Any

from orchestrator.serve.responses.tools import chat_tools


def _text_parts(content: Any) -> Any:
    if not isinstance(content, list):
        return content
    return [
        {"type": "text", "text": p.get("text", "")} if p.get("type") in ("text", "input_text") else p for p in content
    ]


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
    shown = body.get("render_tools")  # native patch 0010: the tools the prompt shows, when they differ
    tools = shown if isinstance(shown, list) else chat_tools(body.get("tools") or [])
    return {"messages": messages, "tools": tools or None, "chat_template_kwargs": body.get("chat_template_kwargs")}
