"""Responses ``input`` items as clients replay them, made into what llama-server's conversion reads.

Pure functions, no I/O. ``server_chat_convert_responses_to_chatcmpl`` (``tools/server/server-chat.cpp``)
answers "Cannot determine type of 'item'" (a 500) for shapes that Codex and the OpenAI SDKs replay
in a conversation's history. Each is rewritten to the equivalent item it reads:

=====================================  =============================================================
item                                   becomes
=====================================  =============================================================
assistant message without ``type``     the same with ``type: "message"``
reasoning with ``content`` text        kept
reasoning with only a ``summary``      reasoning whose content is the summary text
reasoning with only encrypted content  dropped (nothing a local model can read)
``function_call`` with ``namespace``   the call under its joined name (``responses_tools``)
``function_call`` with empty arguments  the call with arguments ``{}`` (other arguments that are not
                                       a JSON object: 400 naming ``input[i].arguments``)
``function_call_output`` with parts    the parts' text joined, as a string (``output_text``,
                                       ``input_text`` or ``text`` parts; images stay parts)
``custom_tool_call``                   a ``function_call`` with arguments ``{"input": ...}``
``custom_tool_call_output``            a ``function_call_output``
``agent_message`` (Codex's message      a user message with its ``input_text`` parts (its
from another agent of the session)      ``encrypted_content`` parts dropped: nothing here can read them)
=====================================  =============================================================

``encrypted_content`` parts of a tool output are dropped for the same reason. Codex's control items
(:data:`CONTROL_ITEMS`: ``configuration_update``, ``compaction_trigger``, ``other``) carry no
conversation content and are skipped; its ``context_compaction`` is read like a ``compaction``.
Its ``additional_tools`` item (tools added mid-conversation) is ``responses.tools.added_tools``'.

A ``compaction`` item this server made (``POST /v1/responses/compact``) becomes the user message
carrying its summary (``responses.compaction``); one from another server cannot be read and is
dropped. Replayed items of hosted tools (:data:`HOSTED_ITEMS`: ``web_search_call``,
``local_shell_call``...), which a session that started on a hosted model carries in its history, are
skipped like the hosted tools themselves (``responses_tools``): nothing here ran them and the
model cannot read them. An ``item_reference`` is skipped too: it points into a store this server
does not have. The same item is skipped on every turn, so the rendered prompt stays a prefix of
the next one.

Anything else that is not an object, or an item of an unknown ``type``, is a 400 naming
``input[i]``.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.errors import ApiError
from orchestrator.serve.repair.agent_errors import checked_arguments
from orchestrator.serve.responses.compaction import expand
from orchestrator.serve.responses.tools import CUSTOM_ARG, joined_name

_TEXT_PARTS = ("output_text", "input_text", "text")
_SEALED = "encrypted_content"  # a part only OpenAI's servers can read
_KNOWN = (
    "message",
    "reasoning",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
)

HOSTED_ITEMS = (
    "web_search_call",
    "file_search_call",
    "computer_call",
    "computer_call_output",
    "code_interpreter_call",
    "image_generation_call",
    "local_shell_call",
    "local_shell_call_output",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "tool_search_call",
    "tool_search_output",
    "item_reference",
)

# Codex's items that steer its hosted backend (a reasoning setting from here on, "compact now", its
# catch-all): no conversation content, so nothing to render. ``reasoning.effort`` of the request
# is what this server applies.
CONTROL_ITEMS = ("configuration_update", "compaction_trigger", "other")


def hosted_item(item: Any) -> str | None:
    """The type of a replayed hosted-tool item or a control item (skipped), or None."""
    itype = item.get("type") if isinstance(item, dict) else None
    return itype if itype in HOSTED_ITEMS or itype in CONTROL_ITEMS else None


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, message, param=param)


def _reasoning(item: dict[str, Any]) -> dict[str, Any] | None:
    content = item.get("content")
    first = content[0] if isinstance(content, list) and content else None
    if isinstance(first, dict) and isinstance(first.get("text"), str):
        return item if isinstance(item.get("summary"), list) else {**item, "summary": []}
    summary = item.get("summary")
    texts = [s["text"] for s in summary if isinstance(s, dict) and isinstance(s.get("text"), str)] if summary else []
    if not any(t.strip() for t in texts):
        return None
    return {**item, "summary": summary, "content": [{"type": "reasoning_text", "text": "\n\n".join(texts)}]}


def _output_text(output: Any) -> Any:
    """A tool output as llama-server reads it: a string, or parts only when they hold images."""
    if not isinstance(output, list):
        return output if isinstance(output, str) else json.dumps(output)
    output = [p for p in output if not (isinstance(p, dict) and p.get("type") == _SEALED)]
    if all(isinstance(p, dict) and p.get("type") in _TEXT_PARTS for p in output):
        return "".join(str(p.get("text", "")) for p in output)
    return [{**p, "type": "input_text"} if isinstance(p, dict) and p.get("type") in _TEXT_PARTS else p for p in output]


def _agent_message(item: dict[str, Any], where: str) -> dict[str, Any] | None:
    content = item.get("content")
    if not isinstance(content, list):
        raise _bad(f"{where}.content must be a list of input_text parts", f"{where}.content")
    texts = [p for p in content if isinstance(p, dict) and p.get("type") == "input_text"]
    if any(not isinstance(p.get("text"), str) for p in texts):
        raise _bad(f"{where}.content: an input_text part needs a string 'text'", f"{where}.content")
    return {"type": "message", "role": "user", "content": texts} if texts else None


def _call(item: dict[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(item.get("call_id"), str):
        raise _bad(f"{where}.call_id must be a string", f"{where}.call_id")
    args = item.get("arguments")
    if not isinstance(args, str):
        args = json.dumps(args if args is not None else {})
    args = checked_arguments(args, f"{where}.arguments") or args
    if "namespace" in item and not isinstance(item["namespace"], str):
        raise _bad(f"{where}.namespace must be a string", f"{where}.namespace")
    name = joined_name(item)
    if name == item.get("name") and args is item.get("arguments") and "namespace" not in item:
        return item
    return {k: v for k, v in item.items() if k != "namespace"} | {"name": name, "arguments": args}


def normalize_item(item: Any, where: str) -> dict[str, Any] | None:
    """One input item as llama-server reads it: ``item`` itself when it already is, a new dict, or
    None when it is dropped. Raises ApiError(400) for an item that cannot be read."""
    if not isinstance(item, dict):
        raise _bad(f"{where} must be an object", where)
    itype = item.get("type")
    if itype is None or itype == "message":
        if item.get("role") == "assistant" and itype is None:
            return {**item, "type": "message"}
        return item
    if itype in ("compaction", "context_compaction"):  # ours: the summary it stands for; another's: unreadable
        return expand(item)
    if itype == "agent_message":
        return _agent_message(item, where)
    if itype in HOSTED_ITEMS:
        return None
    if itype not in _KNOWN:
        raise _bad(f"{where}.type {itype!r} is not supported; use one of {', '.join(_KNOWN)}", f"{where}.type")
    if itype == "reasoning":
        return _reasoning(item)
    if itype == "function_call":
        return _call(item, where)
    if itype == "custom_tool_call":
        raw = item.get("input")
        if not isinstance(raw, str):
            raise _bad(f"{where}.input must be a string (the custom tool's raw input)", f"{where}.input")
        call = {"type": "function_call", "call_id": item.get("call_id"), "name": item.get("name")}
        return _call({**call, "arguments": json.dumps({CUSTOM_ARG: raw})}, where)
    if not isinstance(item.get("call_id"), str):
        raise _bad(f"{where}.call_id must be a string", f"{where}.call_id")
    output = _output_text(item.get("output"))
    if itype == "function_call_output" and output is item.get("output"):
        return item
    return {"type": "function_call_output", "call_id": item["call_id"], "output": output}
