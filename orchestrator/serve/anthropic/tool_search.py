"""Claude Code's tool search on a model that sees every tool (``/v1/messages``).

With tool search on, Claude Code sends most of its tools with ``defer_loading: true`` and a server
tool (``{"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}``, or the
``bm25`` one) that Anthropic's API runs: the model searches, the API answers with
``tool_reference`` blocks, and only then does the model see the tools it found. Loading a tool
that way would put it in the tools block, which the chat template renders at the very top of the
prompt: every load would re-prefill the whole conversation.

Here the model sees every tool from the first turn on, deferred or not, in the same place on every
turn, so the top of the prompt never changes and the model never needs to search:

==========================  ======================================================================
kind                        what happened
==========================  ======================================================================
``tool_search_served``      the tool-search server tool left out of ``tools`` (every tool it could
                            find is already there; the model cannot call a server tool)
``tool_reference_text``     a ``tool_reference`` (in a ``tool_result`` of a client-side search, or
                            a replayed ``tool_search_tool_result``) became text naming the tool, and
                            a replayed ``server_tool_use`` of the search was dropped, so the turn is
                            not an empty tool response
==========================  ======================================================================

A deferred tool keeps its ``defer_loading`` key: llama-server's conversion ignores it. Pure
functions, no I/O.
"""

from __future__ import annotations

from typing import Any

SEARCH_TYPES = ("tool_search_tool_regex", "tool_search_tool_bm25")


def is_search_tool(tool: Any) -> bool:
    """Whether ``tool`` is Anthropic's tool-search server tool (any dated version)."""
    return isinstance(tool, dict) and str(tool.get("type", "")).startswith(SEARCH_TYPES)


def _reference_text(names: list[str]) -> dict[str, Any]:
    listed = ", ".join(names) if names else "no tool"
    return {"type": "text", "text": f"Tool search found: {listed}. Call a found tool by its name."}


def _names(block: dict[str, Any]) -> list[str]:
    """The tool names a ``tool_search_tool_result`` block references."""
    content = block.get("content")
    refs = content.get("tool_references") if isinstance(content, dict) else None
    return [str(r.get("tool_name")) for r in refs or [] if isinstance(r, dict)]


def _result_content(content: Any) -> tuple[Any, bool]:
    """A ``tool_result``'s content with its ``tool_reference`` blocks as one text block."""
    if not isinstance(content, list):
        return content, False
    refs = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_reference"]
    if not refs:
        return content, False
    rest = [b for b in content if not (isinstance(b, dict) and b.get("type") == "tool_reference")]
    return [_reference_text([str(b.get("tool_name")) for b in refs]), *rest], True


def _blocks(content: list[Any]) -> tuple[list[Any], bool]:
    out, changed = [], False
    for block in content:
        btype = block.get("type") if isinstance(block, dict) else None
        if btype == "server_tool_use" and str(block.get("name", "")).startswith(SEARCH_TYPES):
            changed = True
            continue
        if btype == "tool_search_tool_result":
            out.append(_reference_text(_names(block)))
            changed = True
            continue
        if btype == "tool_result":
            inner, moved = _result_content(block.get("content"))
            if moved:
                block, changed = {**block, "content": inner}, True
        out.append(block)
    return out, changed


def prepare(body: dict[str, Any], kinds: list[str]) -> dict[str, Any]:
    """``body`` with the search tool left out and references as text (the caller's dict when there
    is nothing to do); the kinds applied are added to ``kinds``."""
    new: dict[str, Any] = {}
    tools = body.get("tools")
    if isinstance(tools, list) and any(is_search_tool(t) for t in tools):
        new["tools"] = [t for t in tools if not is_search_tool(t)]
        kinds.append("tool_search_served")
    messages = body.get("messages")
    if isinstance(messages, list):
        turns, changed = [], False
        for turn in messages:
            content = turn.get("content") if isinstance(turn, dict) else None
            if isinstance(content, list):
                blocks, moved = _blocks(content)
                if moved:
                    turn, changed = {**turn, "content": blocks}, True
            turns.append(turn)
        if changed:
            new["messages"] = turns
            kinds.append("tool_reference_text")
    return {**body, **new} if new else body
