"""Claude Code's mid-conversation tool changes (``/v1/messages``, ``count_tokens``).

Claude Code 2.1.332 adds and removes tools in the middle of a conversation with a message
``{"role": "system", "content": [{"type": "tool_addition", "tool": ...}, {"type": "tool_removal",
"tool": {"type": "tool_reference", "name": ...}}]}`` inside ``messages``. An addition's ``tool`` is
a ``tool_definition`` (``{"type": "tool_definition", "definition": {name, description,
input_schema}}``) or a ``tool_reference`` naming a ``defer_loading`` tool of ``tools``. Later
requests replay the change where it happened, so the conversation's history says which tools are
offered now.

The chat template renders ``tools`` at the very top of the prompt, so changing that list would
re-prefill the whole conversation. Instead, as Anthropic's API does, the change is rendered where it
happened and the top stays as the first turn rendered it:

- the change becomes text of that system message (``<system-reminder>`` placement follows the
  model's ``system_messages`` policy, like any late system message): an added tool with its
  definition as the tools block shows definitions, a removed tool named as gone;
- ``render_tools`` (native patch 0010) carries the request's own ``tools``, OpenAI-style exactly as
  llama-server's Anthropic conversion makes them, so the prompt's tools block is byte-identical to a
  turn without changes, while ``tools`` becomes the tools offered now (the request's, plus the
  added definitions, less the removed ones): they alone build the tool-call grammar and the
  answer's parser, so a call to an added tool comes back as ``tool_use`` and a removed tool cannot
  be called.

A deferred tool is shown from the first turn on (``tool_search``), so its addition only says it is
now available. Counted as the repair ``tool_change_rendered``. A ``tool_reference`` naming no tool
of ``tools`` or of an earlier addition, and a malformed block, are a 400 naming the block.
Pure functions, no I/O.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.errors import ApiError

CHANGE_BLOCKS = ("tool_addition", "tool_removal")


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, message, param=param)


def oai_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """``tool`` as ``server_chat_convert_anthropic_to_oai`` (``tools/server/server-chat.cpp``) turns
    it into a chat tool: a missing or null description is ``""``, a missing schema ``{}``."""
    schema = tool.get("input_schema")
    return {
        "type": "function",
        "function": {
            "name": tool.get("name") or "",
            "description": tool.get("description") or "",
            "parameters": schema if schema is not None else {},
        },
    }


def _definition(tool: Any, here: str) -> dict[str, Any]:
    definition = tool.get("definition") if isinstance(tool, dict) else None
    if not isinstance(definition, dict) or not isinstance(definition.get("name"), str) or not definition["name"]:
        raise _bad(f"{here}.definition must be a tool with a non-empty 'name'", f"{here}.definition")
    if not isinstance(definition.get("input_schema"), dict):
        raise _bad(f"{here}.definition.input_schema must be a JSON schema object", f"{here}.definition.input_schema")
    return {k: v for k, v in definition.items() if k not in ("defer_loading", "cache_control")}


def _referenced(tool: Any, here: str, known: dict[str, dict[str, Any]]) -> str:
    name = tool.get("name") if isinstance(tool, dict) and tool.get("type") == "tool_reference" else None
    if not isinstance(name, str) or not name:
        raise _bad(f"{here} must be {{'type': 'tool_reference', 'name': ...}}", here)
    if name not in known:
        raise _bad(f"{here}.name {name!r} is not one of the request's tools", f"{here}.name")
    return name


class _Session:
    """The tools offered as the conversation's changes are read in order."""

    def __init__(self, tools: list[dict[str, Any]]) -> None:
        self.known = {t["name"]: t for t in tools}  # every tool named so far, removed or not
        self.offered = [t["name"] for t in tools]

    def change(self, block: dict[str, Any], here: str) -> str:
        """Apply one change block; the line that tells the model of it."""
        tool = block.get("tool")
        if block["type"] == "tool_removal":
            name = _referenced(tool, f"{here}.tool", self.known)
            if name in self.offered:
                self.offered.remove(name)
            return f"The tool {name} has been removed: do not call it."
        if isinstance(tool, dict) and tool.get("type") == "tool_definition":
            definition = _definition(tool, f"{here}.tool")
            name = definition["name"]
            self.known[name] = definition
            text = json.dumps(oai_tool(definition), ensure_ascii=False)
            line = f"The tool {name} is now available. Its definition:\n{text}"
        else:
            name = _referenced(tool, f"{here}.tool", self.known)
            line = f"The tool {name} is now available."
        if name not in self.offered:
            self.offered.append(name)
        return line


def _is_change(msg: Any) -> bool:
    content = msg.get("content") if isinstance(msg, dict) else None
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") in CHANGE_BLOCKS for b in content)


def prepare(body: dict[str, Any], kinds: list[str]) -> dict[str, Any]:
    """``body`` with each tool change as text of its system message, ``tools`` the tools offered
    now and ``render_tools`` the request's own (the caller's dict when there is no change)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not any(_is_change(m) for m in messages):
        return body
    tools = body.get("tools")
    tools = (
        [t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)] if isinstance(tools, list) else []
    )
    session = _Session(tools)
    turns: list[Any] = []
    for i, msg in enumerate(messages):
        if not _is_change(msg):
            turns.append(msg)
            continue
        if msg.get("role") not in ("system", "developer"):
            raise _bad(
                f"messages[{i}]: tool_addition and tool_removal belong in a role 'system' message",
                f"messages[{i}].role",
            )
        content = []
        for j, block in enumerate(msg["content"]):
            if isinstance(block, dict) and block.get("type") in CHANGE_BLOCKS:
                content.append({"type": "text", "text": session.change(block, f"messages[{i}].content[{j}]")})
            else:
                content.append(block)
        turns.append({**msg, "content": content})
    kinds.append("tool_change_rendered")
    offered = [session.known[name] for name in session.offered]
    return {**body, "messages": turns, "tools": offered, "render_tools": [oai_tool(t) for t in tools]}
