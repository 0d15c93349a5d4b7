"""Anthropic Messages API (``POST /v1/messages``, ``/v1/messages/count_tokens``): request repair and errors.

Pure functions, no I/O. llama-server serves both routes itself: ``server_chat_convert_anthropic_to_oai``
(``tools/server/server-chat.cpp``) turns the body into a chat request and renders the template. The
proxy forwards to it after repairing what that conversion passes on and the Qwen3.5 template refuses,
or what it drops without a word:

==========================  ======================================================================
kind                        what happened
==========================  ======================================================================
``system_blocks_joined``    ``system`` text blocks became one string joined by a blank line
                            (llama-server joins them with nothing, gluing sentences together)
``system_merged``           ``system``/``developer`` turns inside ``messages`` moved into ``system``
                            (the template refuses a system message after index 0)
``system_to_user``          (policy ``to_user``) such a turn became a prefixed user turn instead
``system_in_place``         (policy ``in_place``, the default) such a turn after the first user or
                            assistant turn stayed where it stands, as a ``<system-reminder>`` text
                            block of the user turn it follows (or a user turn of its own)
``volatile_dropped``        the ``x-anthropic-billing-header`` line (a per-request ``cch=`` hash)
                            was dropped from ``system`` (``orchestrator.serve.repair.stability``)
``null_content``            null content became ``""``
``tool_results_first``      a user turn holding tool results and other blocks became two turns,
                            the results first (llama-server put the text before them)
``tool_results_ordered``    ``tool_result`` blocks sent back in another order than their ``tool_use``
                            calls were put in the calls' order by id (``repair.tool_order``)
``empty_dropped``           an assistant turn with no text, tool use or thinking was dropped
``redacted_dropped``        ``redacted_thinking`` blocks (opaque, another model's) were dropped
``thinking_mapped``         ``thinking.type`` became ``chat_template_kwargs.enable_thinking``
``thinking_default``        the per-model ``enable_thinking`` default was added
``tool_choice_none``        ``tool_choice: none``: ``tools`` removed (llama-server ignores ``none``)
``tool_choice_named``       ``tool_choice: {type: tool, name}``: ``tools`` cut to that one
                            (llama-server maps it to "any tool")
``tool_search_served``,     Claude Code's tool search (``anthropic.tool_search``)
``tool_reference_text``
``tool_change_rendered``    Claude Code's mid-conversation ``tool_addition`` / ``tool_removal``
                            blocks told where they happened; ``tools`` the tools offered now and
                            ``render_tools`` the prompt's (``anthropic.tool_changes``)
==========================  ======================================================================

Refused with 400 (the field named in the message): a role other than user/assistant (or system/
developer, moved as above), a content block type llama-server does not convert (it would drop it),
image blocks for a model without a vision projector, structured output (``output_format``,
``output_config.format``: llama-server's conversion drops them, so the output would not be
constrained), ``tools`` that is not a list of tools with a ``name`` and an ``input_schema``
object, a ``tool_choice`` with an unknown type or ``type: tool`` without ``name``, a bad draft
length (``speculative``, as on every route), and a conversation with no user text (template:
``No user query found in messages.``). A draft length (``"speculative": {"n_max": K}``) is
flattened as on the chat route; llama.cpp's own fields reach the slot through native patch 0005
(upstream's Anthropic conversion keeps only a fixed list of keys).

Errors on these routes use Anthropic's shape: ``{"type": "error", "error": {"type", "message"}}``
(:func:`error_body`); in a stream, an ``event: error`` event (:func:`error_event`).
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.errors import ApiError
from orchestrator.serve.anthropic import tool_changes, tool_search
from orchestrator.serve.anthropic.tools import check_tools, repair_tools
from orchestrator.serve.drafting.fields import flat_speculative_fields
from orchestrator.serve.repair import media, tool_order
from orchestrator.serve.repair.chat import (
    SYSTEM_AS_USER_PREFIX,
    SYSTEM_JOINER,
    RepairPolicy,
    RepairResult,
)
from orchestrator.serve.repair.stability import append_text, drop_volatile, reminder

ROUTES = ("/v1/messages", "/v1/messages/count_tokens")

# Block types server_chat_convert_anthropic_to_oai turns into chat content; others it drops.
CONVERTED_BLOCKS = ("text", "image", "tool_use", "tool_result", "thinking")
DROPPED_BLOCKS = ("redacted_thinking",)

# Anthropic's error "type" for each status (docs.anthropic.com, "Errors").
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "api_error",
}


def error_type(status: int) -> str:
    """Anthropic's error type for an HTTP ``status``."""
    return _TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


def error_body(err: ApiError) -> dict[str, Any]:
    """``err`` in Anthropic's shape; the field it names is kept in the message."""
    message = err.message if err.param is None or err.param in err.message else f"{err.message} ({err.param})"
    return {"type": "error", "error": {"type": error_type(err.status), "message": message}}


def error_event(err: ApiError) -> bytes:
    """One ``event: error`` SSE event carrying ``err`` in Anthropic's shape."""
    return b"event: error\ndata: " + json.dumps(error_body(err)).encode() + b"\n\n"


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, message, param=param)


def anthropic_enable(ttype: str, default: bool | None, client_thinking: bool) -> bool:
    """``enable_thinking`` for ``thinking.type`` (``enabled``, ``disabled``, ``adaptive``)."""
    if ttype == "adaptive" and default is not None and not client_thinking:
        return default
    return ttype != "disabled"


def _text_of_blocks(blocks: Any, where: str) -> str:
    """Text of a ``system``-style value: a string, or a list of text blocks."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise _bad(f"{where} must be a string or a list of text blocks", where)
    texts = []
    for j, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise _bad(f"{where}[{j}] must be a text block with a string 'text'", f"{where}[{j}]")
        texts.append(block["text"])
    return SYSTEM_JOINER.join(t.strip() for t in texts if t.strip())


def _check_blocks(content: list[Any], where: str, policy: RepairPolicy, kinds: list[str]) -> list[Any]:
    """Validate content blocks; return them without the dropped kinds."""
    kept = []
    for j, block in enumerate(content):
        here = f"{where}[{j}]"
        btype = block.get("type") if isinstance(block, dict) else None
        if btype in DROPPED_BLOCKS:
            _add(kinds, "redacted_dropped")
            continue
        if btype not in CONVERTED_BLOCKS:
            raise _bad(
                f"{here}.type {btype!r} is not supported here; use one of {', '.join(CONVERTED_BLOCKS)}",
                f"{here}.type",
            )
        if btype == "text" and not isinstance(block.get("text"), str):
            raise _bad(f"{here}.text must be a string", f"{here}.text")
        if btype == "tool_use" and not isinstance(block.get("input", {}), dict):
            raise _bad(f"{here}.input must be an object (the tool call's arguments)", f"{here}.input")
        if btype == "image" and not policy.multimodal:
            raise _bad(f"{here}: an 'image' block needs a vision projector, which this model has not", f"{here}.type")
        source = block.get("source") if btype == "image" else None
        if isinstance(source, dict) and source.get("type") == "url":
            media.check_url(source.get("url"), f"{here}.source.url", policy.fetch_media_urls)
        kept.append(block)
    return kept


def _add(kinds: list[str], kind: str) -> None:
    if kind not in kinds:
        kinds.append(kind)


def _blank(content: Any) -> bool:
    """No text, tool use or thinking: a string or text blocks that are all whitespace."""
    if isinstance(content, str):
        return not content.strip()
    return all(b.get("type") == "text" and not b["text"].strip() for b in content)


def _is_query(content: Any) -> bool:
    """Whether a user turn renders as a user query (not only tool results)."""
    if isinstance(content, str):
        text = content.strip()
        return not (text.startswith("<tool_response>") and text.endswith("</tool_response>"))
    return any(isinstance(b, dict) and b.get("type") in ("text", "image") for b in content)


def _repair_turns(messages: Any, policy: RepairPolicy, kinds: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Return ``(turns, system texts to merge)``; raises 400 as the module docstring says."""
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty list", "messages")
    out: list[dict[str, Any]] = []
    system: list[str] = []
    for i, msg in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise _bad(f"{where} must be an object with 'role' and 'content'", where)
        role, content = msg.get("role"), msg.get("content")
        if role not in ("user", "assistant", "system", "developer"):
            raise _bad(f"{where}.role {role!r} is not supported; use user or assistant", f"{where}.role")
        if content is None:
            _add(kinds, "null_content")
            content = ""
        elif isinstance(content, list):
            content = _check_blocks(content, f"{where}.content", policy, kinds)
        elif not isinstance(content, str):
            raise _bad(f"{where}.content must be a string or a list of content blocks", f"{where}.content")
        if role in ("system", "developer"):
            text = _text_of_blocks(content, f"{where}.content").strip()
            if policy.system_messages == "to_user" and out:
                _add(kinds, "system_to_user")
                out.append({"role": "user", "content": SYSTEM_AS_USER_PREFIX + text})
            elif policy.system_messages == "in_place" and out:
                _add(kinds, "system_in_place")
                if text:
                    _append_reminder(out, text)
            elif text:
                _add(kinds, "system_merged")
                system.append(text)
            continue
        if role == "assistant" and _blank(content):
            _add(kinds, "empty_dropped")
            continue
        if role == "user" and isinstance(content, list) and _results_first(content) is not None:
            _add(kinds, "tool_results_first")
            out.extend({**msg, "content": part} for part in _results_first(content) or ())
            continue
        out.append(msg if content is msg.get("content") else {**msg, "content": content})
    if tool_order.order_anthropic(out):
        _add(kinds, tool_order.KIND)
    if not any(m["role"] == "user" and _is_query(m["content"]) for m in out):
        raise _bad(
            "no user text to answer: a user turn with only tool results does not count "
            "(template: 'No user query found in messages.'); add a user text block",
            "messages",
        )
    return out, system


def _results_first(content: list[Any]) -> tuple[list[Any], list[Any]] | None:
    """A user turn's blocks as (tool results, the rest) when it mixes them, else None: llama-server's
    conversion renders the turn's text before its tool results, which must follow their calls."""
    results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    if not results or len(results) == len(content):
        return None
    return results, [b for b in content if not (isinstance(b, dict) and b.get("type") == "tool_result")]


def _append_reminder(out: list[dict[str, Any]], text: str) -> None:
    """A late system text as the last block of the user turn it follows, or a user turn of its own."""
    if out[-1]["role"] == "user":
        out[-1] = {**out[-1], "content": append_text(out[-1]["content"], reminder(text))}
    else:
        out.append({"role": "user", "content": [{"type": "text", "text": reminder(text)}]})


def _repair_thinking(body: dict[str, Any], policy: RepairPolicy, kinds: list[str]) -> dict[str, Any] | None:
    """``chat_template_kwargs`` to send, or None to leave it; explicit kwargs from the client win."""
    ctk = body.get("chat_template_kwargs")
    if ctk is not None and not isinstance(ctk, dict):
        raise _bad("'chat_template_kwargs' must be an object", "chat_template_kwargs")
    ctk = ctk or {}
    if "enable_thinking" in ctk:
        return None
    thinking = body.get("thinking")
    if thinking is not None:
        ttype = thinking.get("type") if isinstance(thinking, dict) else None
        if ttype not in ("enabled", "disabled", "adaptive"):
            raise _bad("thinking.type must be 'enabled', 'adaptive' or 'disabled'", "thinking.type")
        _add(kinds, "thinking_mapped")
        return {**ctk, "enable_thinking": anthropic_enable(ttype, policy.thinking_default, policy.client_thinking)}
    if policy.thinking_default is not None:
        _add(kinds, "thinking_default")
        return {**ctk, "enable_thinking": policy.thinking_default}
    return None


def _refuse_unsupported(body: dict[str, Any]) -> None:
    thinking = body.get("thinking")
    budget = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
    if isinstance(budget, int) and not 0 <= budget <= 2**31 - 1:
        # llama-server reads it as an int (the reasoning budget): 2**32 became 0, no thinking at all
        raise _bad(f"thinking.budget_tokens must be between 0 and 2147483647 (got {budget})", "thinking.budget_tokens")
    if body.get("output_format") is not None:
        raise _bad(
            "output_format (structured output) is not supported on /v1/messages by this server; "
            "use /v1/chat/completions with response_format",
            "output_format",
        )
    config = body.get("output_config")
    if isinstance(config, dict) and config.get("format") is not None:
        raise _bad(
            "output_config.format (structured output) is not supported on /v1/messages by this server; "
            "use /v1/chat/completions with response_format",
            "output_config.format",
        )


def repair_request(body: dict[str, Any], policy: RepairPolicy) -> RepairResult:
    """Repair an Anthropic Messages body (``/v1/messages`` or ``count_tokens``) for the template.

    Args:
        body: the parsed JSON body. Never mutated.
        policy: the model's :class:`RepairPolicy` (system placement, multimodal, thinking default).

    Returns:
        A :class:`RepairResult`; ``body`` is the caller's dict when nothing changed. ``thinking``
        is whether the generation prompt opens a ``<think>`` block.

    Raises:
        ApiError: 400 with ``param`` for the faults in the module docstring.
    """
    kinds: list[str] = []
    body = tool_search.prepare(body, kinds)
    check_tools(body.get("tools"), body.get("tool_choice"))  # as the client numbered them
    body = tool_changes.prepare(body, kinds)
    _refuse_unsupported(body)
    spec = flat_speculative_fields(body)  # reaches the slot through native patch 0005
    if spec is not None:
        _add(kinds, "speculative_flattened")
    turns, merged = _repair_turns(body.get("messages"), policy, kinds)
    new: dict[str, Any] = {}
    system = body.get("system")
    if isinstance(system, list) or merged or (isinstance(system, str) and system != drop_volatile(system)):
        text = _text_of_blocks(_stable_system(system, kinds), "system") if system is not None else ""
        if isinstance(system, list):
            _add(kinds, "system_blocks_joined")
        new["system"] = SYSTEM_JOINER.join(t for t in (text.strip(), *merged) if t)
    elif system is not None and not isinstance(system, str):
        raise _bad("system must be a string or a list of text blocks", "system")
    ctk = _repair_thinking(body, policy, kinds)
    if ctk is not None:
        new["chat_template_kwargs"] = ctk
    tools = repair_tools(body, kinds)
    if not kinds:
        return RepairResult(body=body, changed=False, repairs=[], thinking=_thinking_on(body))
    out = {**body, **new, "messages": turns}
    if spec is not None:
        out.pop("speculative", None)
        out.update(spec)
    if tools:
        out["tools"] = tools
    elif tools is not None:
        out.pop("tool_choice", None)
        if "render_tools" in out:
            out["tools"] = []  # none offered; the prompt still shows the conversation's tools
        else:
            out.pop("tools", None)
    return RepairResult(body=out, changed=True, repairs=kinds, thinking=_thinking_on(out))


def _stable_system(system: Any, kinds: list[str]) -> Any:
    """``system`` without the volatile billing-header line (a string, or its first text block)."""
    stable: Any
    if isinstance(system, str):
        stable = drop_volatile(system)
    elif isinstance(system, list) and system and isinstance(system[0], dict) and isinstance(system[0].get("text"), str):
        first = drop_volatile(system[0]["text"])
        stable = system if first == system[0]["text"] else [{**system[0], "text": first}, *system[1:]]
    else:
        return system
    if stable is not system and stable != system:
        _add(kinds, "volatile_dropped")
    return stable


def _thinking_on(body: dict[str, Any]) -> bool:
    ctk = body.get("chat_template_kwargs")
    if isinstance(ctk, dict) and isinstance(ctk.get("enable_thinking"), bool):
        return bool(ctk["enable_thinking"])
    return True
