"""OpenAI Responses API (``POST /v1/responses``, ``/v1/responses/input_tokens``): request repair.

Pure functions, no I/O. llama-server serves both routes: ``server_chat_convert_responses_to_chatcmpl``
(``tools/server/server-chat.cpp``) turns the body into a chat request (``instructions`` becomes a
system message at index 0, each ``input`` item a message). The proxy forwards after repairing what
would break the Qwen3.5 template or be dropped without a word:

=========================  ========================================================================
kind                       what happened
=========================  ========================================================================
``system_merged``          ``system``/``developer`` input items moved into ``instructions`` (the
                           template refuses a system message after index 0)
``system_to_user``         (policy ``to_user``) a late one became a prefixed user item instead
``system_in_place``        (policy ``in_place``, the default) a late one stayed where it stands, as
                           a ``<system-reminder>`` part of the user item it follows (or a user item)
``items_normalized``       replayed items llama-server cannot read were rewritten
                           (``orchestrator.serve.responses.items``)
``tools_mapped``           ``namespace`` and ``custom`` tools became functions
                           (``orchestrator.serve.responses.tools``)
``hosted_tool_skipped``    hosted tools (``web_search``...) were left out: nothing here runs them
``tool_choice_mapped``     a ``tool_choice`` object (which llama-server takes as ``auto``) became
                           ``required`` over the tool it names, as mapped (``auto`` for a skipped
                           hosted tool)
``hosted_item_skipped``    replayed items of hosted tools (``web_search_call``, ``compaction``,
                           ``item_reference``...) and Codex's control items
                           (``configuration_update``...) were left out of ``input``
``text_format_mapped``     ``text.format`` (structured output) became ``response_format``, which
                           llama-server reads (it ignores ``text``)
``thinking_default``       the per-model ``enable_thinking`` default was added (no ``reasoning``)
``speculative_flattened``  ``"speculative": {"n_max": K}`` became ``"speculative.n_max": K``
``tool_results_ordered``   ``function_call_output`` items sent back in another order than their
                           calls were put in the calls' order by ``call_id`` (``repair.tool_order``)
``tool_change_rendered``   Codex's ``additional_tools`` items became messages where they stand, the
                           added tools offered beside ``tools``, the request's own ``tools`` sent
                           as ``render_tools`` (``responses.tools.added_tools``)
=========================  ========================================================================

State llama-server cannot keep is refused with 400 naming the field, never ignored:
``background: true``, ``conversation``, and ``previous_response_id`` where the adapter did not
resolve it (``store: true`` and ``previous_response_id`` on ``/v1/responses`` are the adapter's:
``orchestrator.serve.responses.stored``). So are per-token log probabilities (``top_logprobs``,
``include: ["message.output_text.logprobs"]``): llama-server's Responses output never carries them.
``instructions`` that is not a string,
``text`` or ``reasoning`` that is not an object are refused naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import ApiError
from orchestrator.serve.drafting.fields import flatten_speculative
from orchestrator.serve.repair import media, tool_order
from orchestrator.serve.repair.chat import SYSTEM_AS_USER_PREFIX, SYSTEM_JOINER, RepairPolicy, RepairResult
from orchestrator.serve.repair.stability import append_text, reminder
from orchestrator.serve.repair.thinking import check_effort
from orchestrator.serve.responses.items import hosted_item, normalize_item
from orchestrator.serve.responses.tools import ToolMap, added_tools, chat_tools, map_choice, map_tools

ROUTES = ("/v1/responses", "/v1/responses/input_tokens")
SYSTEM_ROLES = ("system", "developer")
LOGPROBS_INCLUDE = "message.output_text.logprobs"


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, message, param=param)


def _refuse_state(body: dict[str, Any]) -> None:
    """400 for the stateful features llama-server has no store for."""
    if body.get("previous_response_id"):  # the adapter's recall resolved it where a store is
        raise _bad(
            "previous_response_id is not supported on this route; send the whole conversation in 'input'",
            "previous_response_id",
        )
    if body.get("background") is True:
        raise _bad("background: true is not supported; send the request in the foreground", "background")
    if body.get("conversation") is not None:
        raise _bad("conversation is not supported: this server stores no conversations", "conversation")
    top = body.get("top_logprobs")
    include = body.get("include")
    if top not in (None, 0):
        raise _bad(
            "top_logprobs is not supported on /v1/responses; use /v1/chat/completions with logprobs", "top_logprobs"
        )
    if isinstance(include, list) and LOGPROBS_INCLUDE in include:
        raise _bad(
            f"include {LOGPROBS_INCLUDE!r} is not supported on /v1/responses; use /v1/chat/completions with logprobs",
            "include",
        )


def _item_text(item: dict[str, Any], where: str) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "input_text" or not isinstance(part.get("text"), str):
                raise _bad(f"{where}.content[{j}] must be an input_text part", f"{where}.content[{j}]")
            texts.append(part["text"])
        return "".join(texts)
    raise _bad(f"{where}.content must be a string or a list of input_text parts", f"{where}.content")


def _repair_input(items: list[Any], policy: RepairPolicy, kinds: list[str]) -> tuple[list[Any], list[str]]:
    """Return ``(items, system texts to merge into instructions)``."""
    out: list[Any] = []
    system: list[str] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if hosted_item(item) is not None:
            _add(kinds, "hosted_item_skipped")
            continue
        fixed = normalize_item(item, where)
        if fixed is not item:
            _add(kinds, "items_normalized")
        if fixed is None:
            continue
        _check_media(fixed, where, policy)
        if fixed.get("role") not in SYSTEM_ROLES:
            out.append(fixed)
            continue
        text = _item_text(fixed, where).strip()
        if policy.system_messages == "to_user" and out:
            _add(kinds, "system_to_user")
            out.append({"role": "user", "content": SYSTEM_AS_USER_PREFIX + text})
        elif policy.system_messages == "in_place" and out:
            _add(kinds, "system_in_place")
            _append_reminder(out, text)
        else:
            _add(kinds, "system_merged")
            if text:
                system.append(text)
    if tool_order.order_responses(out):
        _add(kinds, tool_order.KIND)
    if not any(_is_user_query(item) for item in out):
        raise _bad(
            "no user message to answer in 'input' (template: 'No user query found in messages.'); add a user message",
            "input",
        )
    return out, system


def _check_media(item: dict[str, Any], where: str, policy: RepairPolicy) -> None:
    """An ``input_image`` part's URL as llama-server may load it (``repair.media``)."""
    content = item.get("content")
    for j, part in enumerate(content if isinstance(content, list) else ()):
        if isinstance(part, dict) and part.get("type") == "input_image" and "image_url" in part:
            media.check_url(part["image_url"], f"{where}.content[{j}].image_url", policy.fetch_media_urls)


def _append_reminder(out: list[Any], text: str) -> None:
    """A late system text as the last part of the user item it follows, or a user item of its own."""
    if not text:
        return
    last = out[-1]
    if last.get("role") == "user" and isinstance(last.get("content"), list | str):
        content = last["content"]
        parts = [{"type": "input_text", "text": content}] if isinstance(content, str) else content
        out[-1] = {**last, "content": append_text(parts, reminder(text), "input_text")}
    else:
        out.append({"role": "user", "content": [{"type": "input_text", "text": reminder(text)}]})


def _is_user_query(item: dict[str, Any]) -> bool:
    if item.get("role") != "user":
        return False
    content = item.get("content")
    if isinstance(content, str):
        text = content.strip()
        return not (text.startswith("<tool_response>") and text.endswith("</tool_response>"))
    return isinstance(content, list)


def _add(kinds: list[str], kind: str) -> None:
    if kind not in kinds:
        kinds.append(kind)


def text_format_to_response_format(fmt: Any) -> dict[str, Any] | None:
    """Map ``text.format`` to chat's ``response_format`` (None for plain text).

    Raises:
        ApiError: 400 naming ``text.format...`` for an unknown type or a json_schema without a schema.
    """
    if not isinstance(fmt, dict):
        raise _bad("text.format must be an object with a 'type'", "text.format")
    ftype = fmt.get("type")
    if ftype == "text":
        return None
    if ftype == "json_object":
        return {"type": "json_object"}
    if ftype == "json_schema":
        schema = fmt.get("schema")
        if not isinstance(schema, dict):
            raise _bad("text.format.schema must be a JSON schema object for type json_schema", "text.format.schema")
        wrapper = {"name": fmt.get("name", "response"), "schema": schema, "strict": fmt.get("strict", False)}
        return {"type": "json_schema", "json_schema": wrapper}
    raise _bad(f"text.format.type {ftype!r} is not supported; use text, json_object or json_schema", "text.format.type")


def _repair_extras(body: dict[str, Any], policy: RepairPolicy, kinds: list[str], new: dict[str, Any]) -> None:
    """Thinking default, text.format: write replacements into ``new``."""
    text = body.get("text")
    if isinstance(text, dict) and "format" in text:
        if "response_format" in body:
            raise _bad("send text.format or response_format, not both", "text.format")
        mapped = text_format_to_response_format(text["format"])
        _add(kinds, "text_format_mapped")
        new["text"] = {k: v for k, v in text.items() if k != "format"}
        if mapped is not None:
            new["response_format"] = mapped
    ctk = body.get("chat_template_kwargs")
    if ctk is not None and not isinstance(ctk, dict):
        raise _bad("'chat_template_kwargs' must be an object", "chat_template_kwargs")
    reasoning = body.get("reasoning")
    has_effort = isinstance(reasoning, dict) and reasoning.get("effort") is not None
    if policy.thinking_default is not None and not has_effort and "enable_thinking" not in (ctk or {}):
        _add(kinds, "thinking_default")
        new["chat_template_kwargs"] = {**(ctk or {}), "enable_thinking": policy.thinking_default}


def _repair_tools(body: dict[str, Any], kinds: list[str], new: dict[str, Any]) -> ToolMap:
    """Namespace and custom tools as functions, hosted tools left out, ``tool_choice`` onto them
    (``responses_tools``)."""
    mapped = map_tools(body.get("tools"))
    if mapped.namespaced or mapped.custom:
        _add(kinds, "tools_mapped")
    if mapped.skipped:
        _add(kinds, "hosted_tool_skipped")
    tools = mapped.tools if mapped.tools is not None else body.get("tools") or []
    if mapped.tools is not None:
        new["tools"] = mapped.tools
    choice, chosen = map_choice(body.get("tool_choice"), mapped, tools)
    if choice != body.get("tool_choice"):
        _add(kinds, "tool_choice_mapped")
        new["tool_choice"] = choice
    if chosen is not None:
        new["tools"] = chosen
    return mapped


def _with_added_tools(body: dict[str, Any], items: list[Any], added: list[Any]) -> dict[str, Any]:
    """``body`` offering the tools ``additional_tools`` items added, its prompt showing its own."""
    tools = body.get("tools")
    own: list[Any] = tools if isinstance(tools, list) else []
    mapped = map_tools(own)
    shown = chat_tools(mapped.tools if mapped.tools is not None else own)
    return {**body, "input": items, "tools": [*own, *added], "render_tools": shown}


def _check_types(body: dict[str, Any]) -> None:
    """400 for top-level fields of the wrong type."""
    if body.get("instructions") is not None and not isinstance(body["instructions"], str):
        raise _bad("instructions must be a string", "instructions")
    for name in ("text", "reasoning"):
        if body.get(name) is not None and not isinstance(body[name], dict):
            raise _bad(f"{name} must be an object", name)
    check_effort((body.get("reasoning") or {}).get("effort"), "reasoning.effort")


@dataclass
class ResponsesRepair(RepairResult):
    """A Responses body's :class:`RepairResult`, with the client's tools as mapped for llama-server
    (made once here, read again by the answer side: ``ResponsesAnswer``)."""

    tools: ToolMap = field(default_factory=ToolMap)


def repair_request(body: dict[str, Any], policy: RepairPolicy) -> ResponsesRepair:
    """Repair a Responses body (``/v1/responses`` or ``/v1/responses/input_tokens``).

    Args:
        body: the parsed JSON body. Never mutated.
        policy: the model's :class:`RepairPolicy`.

    Returns:
        A :class:`ResponsesRepair` (the caller's dict when nothing changed), whose ``tools`` are the
        client's tools as mapped for llama-server (``responses_tools.ToolMap``). ``thinking`` is false
        when ``reasoning.effort`` is ``none`` or ``enable_thinking`` ends up false.

    Raises:
        ApiError: 400 with ``param`` for refused state, a bad ``input``, ``text.format``, field type or tool.
    """
    _refuse_state(body)
    _check_types(body)
    kinds: list[str] = []
    new: dict[str, Any] = {}
    items = body.get("input")
    changes = added_tools(items) if isinstance(items, list) else None
    if changes is not None:
        body = _with_added_tools(body, *changes)
        new["input"] = items = body["input"]
        new["tools"], new["render_tools"] = body["tools"], body["render_tools"]
        _add(kinds, "tool_change_rendered")
    if isinstance(items, list):
        out, merged = _repair_input(items, policy, kinds)
        if merged or len(out) != len(items) or any(a is not b for a, b in zip(out, items, strict=False)):
            new["input"] = out
        if merged:
            instructions = body.get("instructions")
            parts = [instructions.strip()] if instructions and instructions.strip() else []
            new["instructions"] = SYSTEM_JOINER.join(parts + merged)
    elif not isinstance(items, str):
        raise _bad("'input' must be a string or a list of input items", "input")
    _repair_extras(body, policy, kinds, new)
    tools = _repair_tools(body, kinds, new)
    flat = flatten_speculative({**body, **new})
    if flat is not None:
        _add(kinds, "speculative_flattened")
    if not kinds:
        return ResponsesRepair(body=body, changed=False, repairs=[], thinking=_thinking_on(body), tools=tools)
    out_body = flat if flat is not None else {**body, **new}
    return ResponsesRepair(body=out_body, changed=True, repairs=kinds, thinking=_thinking_on(out_body), tools=tools)


def _thinking_on(body: dict[str, Any]) -> bool:
    ctk = body.get("chat_template_kwargs")
    if isinstance(ctk, dict) and isinstance(ctk.get("enable_thinking"), bool):
        return bool(ctk["enable_thinking"])
    reasoning = body.get("reasoning")
    return not (isinstance(reasoning, dict) and reasoning.get("effort") == "none")
