"""A Chat Completions ``tool_choice`` object, turned into what llama-server reads.

llama-server reads ``tool_choice`` as a string (``json_value(body, "tool_choice", "auto")`` in
``tools/server/server-common.cpp``): an object, OpenAI's way to force one function
(``{"type": "function", "function": {"name": ...}}``) or to limit the choice
(``{"type": "allowed_tools", "allowed_tools": {"mode", "tools"}}``), was taken as ``auto`` with
only a warning in its log, so a forced call could come back as text. Like the Anthropic and
Responses routes, the object becomes ``required`` (or the ``allowed_tools`` mode) with ``tools``
cut to the named functions.

Pure: imports nothing of the package but ``orchestrator.errors``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.errors import ApiError

MODES = ("auto", "required")


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, message, param=param)


def _function_name(choice: Any, param: str) -> str:
    fn = choice.get("function") if isinstance(choice, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if choice.get("type") != "function" or not isinstance(name, str) or not name:
        raise _bad(f"{param} must be {{'type': 'function', 'function': {{'name': ...}}}}", param)
    return name


def _wanted(choice: dict[str, Any]) -> tuple[list[str], str]:
    if choice.get("type") == "function":
        return [_function_name(choice, "tool_choice")], "required"
    if choice.get("type") != "allowed_tools":
        raise _bad(
            "tool_choice must be 'none', 'auto', 'required', {'type': 'function', 'function': {'name': ...}} "
            "or {'type': 'allowed_tools', ...} (llama-server runs function tools only)",
            "tool_choice.type",
        )
    allowed = choice.get("allowed_tools")
    if not isinstance(allowed, dict) or allowed.get("mode") not in MODES or not isinstance(allowed.get("tools"), list):
        raise _bad(
            "tool_choice.allowed_tools must be {'mode': 'auto' or 'required', 'tools': [...]}",
            "tool_choice.allowed_tools",
        )
    names = [_function_name(t, f"tool_choice.allowed_tools.tools[{i}]") for i, t in enumerate(allowed["tools"])]
    return names, allowed["mode"]


def resolve(body: dict[str, Any], repaired: Callable[[str], None]) -> dict[str, Any]:
    """The ``tools`` and ``tool_choice`` to send for an object ``tool_choice`` (``{}`` when it is
    not one); ``repaired("tool_choice_named")`` is called when they change.

    Raises:
        ApiError: 400 naming ``tool_choice`` for an object of another shape, or naming a function
            that is not in ``tools``.
    """
    choice = body.get("tool_choice")
    if not isinstance(choice, dict):
        return {}
    names, mode = _wanted(choice)
    tools = body.get("tools")
    kept = (
        [t for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)]
        if isinstance(tools, list)
        else []
    )
    chosen = [t for t in kept if t["function"].get("name") in names]
    missing = sorted(set(names) - {t["function"].get("name") for t in chosen})
    if missing:
        raise _bad(f"tool_choice names {', '.join(map(repr, missing))}, which is not in tools", "tool_choice")
    repaired("tool_choice_named")
    return {"tools": chosen, "tool_choice": mode}
