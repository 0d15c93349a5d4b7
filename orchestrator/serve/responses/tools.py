"""Responses tools that are not plain functions, as Codex sends them: mapped to functions or skipped.

Pure functions, no I/O. llama-server's Responses conversion (``server_chat_convert_responses_to_chatcmpl``
in ``tools/server/server-chat.cpp``) keeps only ``type: function`` tools and skips the rest with a
log line. Codex CLI 0.171 on its default config sends, besides its functions:

* ``namespace`` (``multi_agent_v1``: a group of function tools). Each function in it is offered to
  the model as a function named ``<namespace>.<name>`` (a dot never occurs in an OpenAI function
  name, so the mapping back is unambiguous); a call the model makes comes back in Codex's form:
  ``{"type": "function_call", "name": "<name>", "namespace": "<namespace>", ...}``, and a replayed
  call with a ``namespace`` is rendered under the same joined name.
* ``custom`` (freeform tools such as ``apply_patch``): offered as a function with one string
  argument ``input``; a call comes back as ``{"type": "custom_tool_call", "name", "input",
  "call_id"}``, and replayed ``custom_tool_call`` / ``custom_tool_call_output`` items become the
  function call and output they stand for.
* hosted tools (``web_search``, ``file_search``, ``local_shell``, ``image_generation``,
  ``code_interpreter``, ``computer_use_preview``, ``mcp``...): this server cannot run them; they are
  skipped (the metric ``orchestrator_repairs_total{kind="hosted_tool_skipped"}`` counts the
  requests) rather than refused, so the client's other tools keep working.

A ``tool_choice`` is mapped onto the same functions (:func:`map_choice`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import ApiError

NS_SEP = "."
CUSTOM_ARG = "input"


@dataclass
class ToolMap:
    """What :func:`map_tools` did, and how to turn the model's calls back into the client's form.

    Attributes:
        tools: the function tools to send (None: the request's ``tools`` need no change).
        namespaced: joined function name -> (namespace, name).
        custom: names of ``custom`` tools (offered as functions with one ``input`` string).
        skipped: types of the hosted tools that were left out, in order, each once.
    """

    tools: list[dict[str, Any]] | None = None
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)
    custom: set[str] = field(default_factory=set)
    skipped: list[str] = field(default_factory=list)


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, message, param=param)


def _function(tool: Any, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or not tool["name"]:
        raise _bad(f"{where}.name must be a non-empty string", f"{where}.name")
    return tool


def _custom_as_function(tool: dict[str, Any]) -> dict[str, Any]:
    about = tool.get("description") or ""
    fmt = tool.get("format")
    if isinstance(fmt, dict) and isinstance(fmt.get("definition"), str):
        about += f"\n\nThe input follows this {fmt.get('syntax', 'grammar')} grammar:\n{fmt['definition']}"
    return {
        "type": "function",
        "name": tool["name"],
        "description": about.strip(),
        "parameters": {
            "type": "object",
            "properties": {CUSTOM_ARG: {"type": "string", "description": "the raw input of the tool"}},
            "required": [CUSTOM_ARG],
        },
    }


def map_tools(tools: Any) -> ToolMap:
    """Map a Responses ``tools`` list onto function tools (see the module docstring).

    Raises:
        ApiError: 400 naming ``tools[i]...`` for a tool that is not an object, a function or
            custom tool without a name, a namespace without a list of tools.
    """
    out = ToolMap()
    if tools is None:
        return out
    if not isinstance(tools, list):
        raise _bad("tools must be a list of tool objects", "tools")
    mapped: list[dict[str, Any]] = []
    changed = False
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        ttype = tool.get("type") if isinstance(tool, dict) else None
        if ttype == "function":
            mapped.append(_function(tool, where))
        elif ttype == "custom":
            out.custom.add(_function(tool, where)["name"])
            mapped.append(_custom_as_function(tool))
            changed = True
        elif ttype == "namespace":
            _namespace(_function(tool, where), where, mapped, out)
            changed = True
        elif isinstance(ttype, str) and ttype:
            if ttype not in out.skipped:
                out.skipped.append(ttype)
            changed = True
        else:
            raise _bad(f"{where}.type must be a string naming the tool type", f"{where}.type")
    if changed:
        out.tools = mapped
    return out


def _namespace(tool: dict[str, Any], where: str, mapped: list[dict[str, Any]], out: ToolMap) -> None:
    inner = tool.get("tools")
    if not isinstance(inner, list):
        raise _bad(f"{where}.tools must be a list of function tools", f"{where}.tools")
    for j, fn in enumerate(inner):
        here = f"{where}.tools[{j}]"
        fn = _function(fn, here)
        if fn.get("type", "function") != "function":
            continue  # nothing but functions is known to live in a namespace
        joined = f"{tool['name']}{NS_SEP}{fn['name']}"
        out.namespaced[joined] = (tool["name"], fn["name"])
        about = fn.get("description") or ""
        mapped.append({**fn, "type": "function", "name": joined, "description": about})


def joined_name(item: dict[str, Any]) -> str:
    """The function name a replayed call is rendered under (``namespace.name`` for a namespaced one)."""
    name = str(item.get("name", ""))
    ns = item.get("namespace")
    return f"{ns}{NS_SEP}{name}" if isinstance(ns, str) and ns else name


def client_call(item: dict[str, Any], tool_map: ToolMap) -> dict[str, Any] | None:
    """The client's form of the model's ``function_call`` output ``item``, or None when it is already
    right (a plain function). Returns a new dict; ``item`` is not changed."""
    if item.get("type") != "function_call":
        return None
    name = item.get("name")
    if name in tool_map.namespaced:
        ns, short = tool_map.namespaced[name]
        return {**item, "name": short, "namespace": ns}
    if name in tool_map.custom:
        args = item.get("arguments")
        try:
            parsed = json.loads(args) if isinstance(args, str) else {}
        except ValueError:
            parsed = {}
        text = parsed.get(CUSTOM_ARG) if isinstance(parsed, dict) else None
        call = {k: v for k, v in item.items() if k != "arguments"}
        call["type"] = "custom_tool_call"
        call["input"] = text if isinstance(text, str) else (args if isinstance(args, str) else "")
        return call
    return None


def remap_output(output: Any, tool_map: ToolMap) -> bool:
    """Rewrite the model's calls in a Responses ``output`` list in place; whether any changed."""
    changed = False
    if isinstance(output, list):
        for k, item in enumerate(output):
            new = client_call(item, tool_map) if isinstance(item, dict) else None
            if new is not None:
                output[k] = new
                changed = True
    return changed


CHOICE_WORDS = ("auto", "none", "required")


def _same_hosted(ctype: str, skipped: list[str]) -> bool:
    """Whether a choice's type names a skipped hosted tool (``web_search_preview`` names ``web_search``)."""
    base = ctype.split("_preview")[0]
    return any(base == s.split("_preview")[0] for s in skipped)


def _chosen(spec: Any, tool_map: ToolMap, names: list[Any], where: str) -> str | None:
    """The function name a tool choice ``spec`` names, or None for a skipped hosted tool."""
    ctype = spec.get("type") if isinstance(spec, dict) else None
    if not isinstance(ctype, str) or not ctype:
        raise _bad(f"{where} must be an object with a 'type'", where)
    if ctype in ("function", "custom"):
        name, ns = spec.get("name"), spec.get("namespace")
        if not isinstance(name, str) or not name or (ns is not None and not isinstance(ns, str)):
            raise _bad(f"{where} needs a string 'name' (and 'namespace', if any, a string)", where)
        joined = joined_name(spec) if ctype == "function" else name
        if joined in names and (ctype == "function") == (joined not in tool_map.custom):
            return joined
        raise _bad(f"{where} names the {ctype} tool {joined!r}, which is not in tools", where)
    if _same_hosted(ctype, tool_map.skipped):
        return None
    raise _bad(f"{where} names a {ctype!r} tool, which is not in tools", where)


def map_choice(choice: Any, tool_map: ToolMap, tools: list[Any]) -> tuple[Any, list[Any] | None]:
    """The ``(tool_choice, tools)`` to send for a Responses ``tool_choice``; tools None: unchanged.

    llama-server reads only the words ``auto``, ``none``, ``required`` and takes any object as
    ``auto`` without a word. A choice naming a function (by its joined name for a namespaced one),
    a custom tool, or ``allowed_tools`` becomes ``required`` (``auto`` for ``allowed_tools`` in mode
    auto) over the tools it names, as they were mapped; one naming a skipped hosted tool becomes
    ``auto``.

    Raises:
        ApiError: 400 naming ``tool_choice`` for a word or object that is not known, or one naming
            a tool that is not in ``tools``.
    """
    if choice is None or choice in CHOICE_WORDS:
        return choice, None
    if isinstance(choice, str):
        raise _bad(f"tool_choice must be one of {', '.join(CHOICE_WORDS)} or an object (got {choice!r})", "tool_choice")
    names = [t.get("name") for t in tools if isinstance(t, dict)]
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        specs = choice.get("tools")
        mode = choice.get("mode", "auto")
        if not isinstance(specs, list) or mode not in ("auto", "required"):
            raise _bad(
                "tool_choice of type allowed_tools needs 'tools' (a list) and mode auto or required", "tool_choice"
            )
        chosen = [_chosen(s, tool_map, names, f"tool_choice.tools[{j}]") for j, s in enumerate(specs)]
        kept = {c for c in chosen if c is not None}
        if not kept:
            return "auto", None
        return mode, [t for t in tools if isinstance(t, dict) and t.get("name") in kept]
    name = _chosen(choice, tool_map, names, "tool_choice")
    if name is None:
        return "auto", None
    return "required", [t for t in tools if isinstance(t, dict) and t.get("name") == name]


ADDED = "additional_tools"


def chat_tools(tools: list[Any]) -> list[dict[str, Any]]:
    """Function ``tools`` in chat form, as llama-server's Responses conversion makes them
    (``server_chat_convert_responses_to_chatcmpl``). Its ``strict`` is left out: the template sees
    only name, description and parameters (``common_chat_tools_parse_oaicompat``)."""
    return [
        {"type": "function", "function": {k: v for k, v in tool.items() if k not in ("type", "strict")}}
        for tool in tools
        if isinstance(tool, dict) and tool.get("type") == "function"
    ]


def added_tools(items: list[Any]) -> tuple[list[Any], list[Any]] | None:
    """Codex's ``additional_tools`` items (tools added in the middle of a conversation), or None
    when ``items`` has none.

    As for Claude Code's ``tool_addition`` (``anthropic.tool_changes``), the change is rendered where
    it happened and the prompt's tools block stays the first turn's: each item becomes a message of
    its own role (a ``developer`` message: the system-message policy places it) that names the
    added tools with their definitions as the tools block shows them. Returns ``(items, added)``:
    the input with those messages, and the added tools in order (the caller offers them beside
    ``tools`` and sends the request's own ``tools`` as ``render_tools``, native patch 0010).

    Raises:
        ApiError: 400 naming ``input[i].tools`` when an item's ``tools`` is not a list.
    """
    if not any(isinstance(item, dict) and item.get("type") == ADDED for item in items):
        return None
    out: list[Any] = []
    added: list[Any] = []
    for i, item in enumerate(items):
        if not (isinstance(item, dict) and item.get("type") == ADDED):
            out.append(item)
            continue
        tools = item.get("tools")
        if not isinstance(tools, list):
            raise _bad(f"input[{i}].tools must be a list of tools", f"input[{i}].tools")
        mapped = map_tools(tools)
        shown = chat_tools(mapped.tools if mapped.tools is not None else tools)
        lines = [
            f"The tool {t['function']['name']} is now available. Its definition:\n{json.dumps(t, ensure_ascii=False)}"
            for t in shown
        ]
        added.extend(tools)
        role = item.get("role") if isinstance(item.get("role"), str) and item.get("role") else "developer"
        out.append({"type": "message", "role": role, "content": [{"type": "input_text", "text": "\n".join(lines)}]})
    return out, added
