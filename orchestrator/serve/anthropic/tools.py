"""Anthropic ``tools`` and ``tool_choice`` (``/v1/messages``, ``count_tokens``): checked, and
``tool_choice`` made what llama-server's conversion would not do (``none``: no tools offered; ``tool``:
only the named one). Pure functions, no I/O; the kinds are in ``anthropic.repair``'s table.
"""

from __future__ import annotations

from typing import Any

from orchestrator.errors import ApiError


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, message, param=param)


def _add(kinds: list[str], kind: str) -> None:
    if kind not in kinds:
        kinds.append(kind)


def check_tools(tools: Any, choice: Any) -> None:
    """400 for a malformed ``tools`` list or ``tool_choice`` (llama-server would answer 200 without them)."""
    if tools is not None:
        if not isinstance(tools, list):
            raise _bad("tools must be a list of tool objects", "tools")
        for i, tool in enumerate(tools):
            here = f"tools[{i}]"
            if not isinstance(tool, dict):
                raise _bad(f"{here} must be an object with 'name' and 'input_schema'", here)
            if not isinstance(tool.get("name"), str) or not tool["name"]:
                raise _bad(f"{here}.name must be a non-empty string", f"{here}.name")
            if not isinstance(tool.get("input_schema"), dict):
                raise _bad(
                    f"{here}.input_schema must be a JSON schema object (only client tools with an "
                    "input_schema are supported; server tools are not)",
                    f"{here}.input_schema",
                )
    if choice is None:
        return
    ctype = choice.get("type") if isinstance(choice, dict) else None
    if ctype not in ("auto", "any", "tool", "none"):
        raise _bad("tool_choice.type must be 'auto', 'any', 'tool' or 'none'", "tool_choice.type")
    if ctype == "tool" and (not isinstance(choice.get("name"), str) or not choice["name"]):
        raise _bad("tool_choice.name is required (a string) when tool_choice.type is 'tool'", "tool_choice.name")


def repair_tools(body: dict[str, Any], kinds: list[str]) -> list[Any] | None:
    """``tools`` to send when ``tool_choice`` needs it (None: unchanged, ``[]``: remove)."""
    choice = body.get("tool_choice")
    tools = body.get("tools")
    check_tools(tools, choice)
    if not isinstance(choice, dict):
        return None
    if choice.get("type") == "none":
        _add(kinds, "tool_choice_none")
        return []
    if choice.get("type") == "tool":
        name = choice.get("name")
        named = [t for t in tools or [] if t.get("name") == name]
        if not named:
            raise _bad(f"tool_choice.name {name!r} is not one of the request's tools", "tool_choice.name")
        _add(kinds, "tool_choice_named")
        return named
    return None
