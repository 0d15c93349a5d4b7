"""Edits of a recorded agent request in its own API's shape, for ``orchestrator bench agent``.

Pure functions on JSON values (no I/O): each takes a request body and its route (Anthropic
``/v1/messages`` as Claude Code sends it, ``/v1/responses`` as Codex does, ``/v1/chat/completions``
as opencode does) and returns a new body; the input is never changed. They are what the session
scenarios of :mod:`orchestrator.bench.agent_scenarios` are made of: the history, the thinking
switch, reasoning sent back, a user turn, a second session and a side request.
"""

from __future__ import annotations

import copy
import json
from typing import Any

MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"
CHAT = "/v1/chat/completions"


def history_key(route: str) -> str:
    """The body field holding the conversation: ``input`` for Responses, else ``messages``."""
    return "input" if route == RESPONSES else "messages"


def history(body: dict[str, Any], route: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = body.get(history_key(route)) or []
    return items


def with_history(body: dict[str, Any], route: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    return {**body, history_key(route): items}


def is_assistant(item: dict[str, Any]) -> bool:
    """An item the model wrote: an assistant message, or a Responses call or reasoning item."""
    return item.get("role") == "assistant" or item.get("type") in ("function_call", "custom_tool_call", "reasoning")


def answer_starts(items: list[dict[str, Any]]) -> list[int]:
    """Where each answer of the model starts: an answer is a run of consecutive assistant items."""
    return [i for i, it in enumerate(items) if is_assistant(it) and (i == 0 or not is_assistant(items[i - 1]))]


def cut_before_answer(items: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The history up to (not including) the ``n``-th answer of the model (1-based); the whole
    history when it has fewer."""
    starts = answer_starts(items)
    return items[: starts[n - 1]] if n <= len(starts) else list(items)


def with_thinking(body: dict[str, Any], route: str, on: bool) -> dict[str, Any]:
    """Thinking switched on or off explicitly, in the API's own field and in ``chat_template_kwargs``
    (which llama-server reads on every route, so both paths of the bench render the same prompt)."""
    out = {**body, "chat_template_kwargs": {**(body.get("chat_template_kwargs") or {}), "enable_thinking": on}}
    if route == MESSAGES:
        out["thinking"] = {"type": "enabled", "budget_tokens": 1024} if on else {"type": "disabled"}
    elif route == RESPONSES:
        out["reasoning"] = {**(body.get("reasoning") or {}), "effort": "medium" if on else "none"}
    return out


def reasoning_text(n: int) -> str:
    return f"Step {n}: the user wants this done with the tools; run the next command and read its output first."


def _reasoning_item(n: int) -> dict[str, Any]:
    # Codex sends its reasoning back encrypted (unreadable to any other server; the endpoint drops it)
    return {"type": "reasoning", "id": f"rs_bench_{n}", "summary": [], "encrypted_content": f"gAAAAB-bench-{n}"}


def with_reasoning(body: dict[str, Any], route: str) -> dict[str, Any]:
    """Every earlier answer of the model carries its reasoning, as each client sends it back: Claude
    Code a thinking block (with a signature), Codex an encrypted reasoning item, opencode
    ``reasoning_content``."""
    items: list[dict[str, Any]] = []
    starts = answer_starts(history(body, route))
    n = 0
    for i, item in enumerate(history(body, route)):
        n += i in starts
        if route == RESPONSES:
            if i in starts and item.get("type") != "reasoning":
                items.append(_reasoning_item(n))
            items.append(item)
        elif item.get("role") == "assistant" and route == MESSAGES:
            content = item.get("content")
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
            thinking = {"type": "thinking", "thinking": reasoning_text(n), "signature": f"sig-bench-{n}"}
            items.append({**item, "content": [thinking, *[b for b in blocks if b.get("type") != "thinking"]]})
        elif item.get("role") == "assistant":
            items.append({**item, "reasoning_content": reasoning_text(n)})
        else:
            items.append(item)
    return with_history(body, route, items)


def answer_and_ask(body: dict[str, Any], route: str, answer: str, question: str, reasoning: bool) -> dict[str, Any]:
    """The next request after ``body``: the model's final text answer to it, then a new user message."""
    n = 1 + len(answer_starts(history(body, route)))
    if route == MESSAGES:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": answer}]
        if reasoning:
            blocks.insert(0, {"type": "thinking", "thinking": reasoning_text(n), "signature": f"sig-bench-{n}"})
        added = [
            {"role": "assistant", "content": blocks},
            {"role": "user", "content": [{"type": "text", "text": question}]},
        ]
    elif route == RESPONSES:
        added = [
            *([_reasoning_item(n)] if reasoning else []),
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": question}]},
        ]
    else:
        said: dict[str, Any] = {"role": "assistant", "content": answer}
        if reasoning:
            said["reasoning_content"] = reasoning_text(n)
        added = [said, {"role": "user", "content": question}]
    return with_history(body, route, [*history(body, route), *added])


def _is_prompt_text(text: Any) -> bool:
    """A user's own words, not a client's injected context (``<system-reminder>``, ``<environment_context>``)."""
    return isinstance(text, str) and bool(text.strip()) and not text.lstrip().startswith("<")


def first_prompt(body: dict[str, Any], route: str) -> str:
    """The text of the first thing the user typed (the session's first user message, its own words)."""
    for item in history(body, route):
        if item.get("role") != "user":
            continue
        content = item.get("content")
        if _is_prompt_text(content):
            return str(content)
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and _is_prompt_text(part.get("text")):
                return str(part["text"])
    return ""


def with_first_prompt(body: dict[str, Any], route: str, text: str) -> dict[str, Any]:
    """The same request with the user's first words replaced by ``text`` (another session's opening)."""
    old = first_prompt(body, route)
    items = copy.deepcopy(history(body, route))
    for item in items:
        if item.get("role") != "user":
            continue
        if item.get("content") == old:
            item["content"] = text
            break
        parts = [p for p in item.get("content") or [] if isinstance(p, dict) and p.get("text") == old]
        if parts:
            parts[0]["text"] = text
            break
    return with_history(body, route, items)


def with_session(body: dict[str, Any], session_id: str) -> dict[str, Any]:
    """The same request from another client session: Claude Code's ``metadata.user_id`` session id,
    Codex's ``prompt_cache_key`` and the ids in its ``client_metadata`` (opencode sends none)."""
    out = copy.deepcopy(body)
    meta = out.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("user_id"), str):
        try:
            user = json.loads(meta["user_id"])
        except ValueError:
            user = None
        meta["user_id"] = json.dumps({**user, "session_id": session_id}) if isinstance(user, dict) else session_id
    if "prompt_cache_key" in out:
        old = out["prompt_cache_key"]
        out["prompt_cache_key"] = session_id
        if isinstance(out.get("client_metadata"), dict):
            text = json.dumps(out["client_metadata"]).replace(str(old), session_id)
            out["client_metadata"] = json.loads(text)
    return out


def side_request(body: dict[str, Any], route: str, text: str) -> dict[str, Any]:
    """A side request of the same session, as Claude Code sends for a title or a summary: the same
    system prompt, tools and session, and one user message (``text``) instead of the conversation."""
    leading = []
    for item in history(body, route):
        if item.get("role") not in ("system", "developer"):
            break
        leading.append(item)
    user: dict[str, Any]
    if route == RESPONSES:
        user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    elif route == MESSAGES:
        user = {"role": "user", "content": [{"type": "text", "text": text}]}
    else:
        user = {"role": "user", "content": text}
    return with_history(body, route, [*leading, user])


def streamed(body: dict[str, Any], route: str, max_tokens: int) -> dict[str, Any]:
    """Streamed, with the answer cut to ``max_tokens`` (and usage in the stream for chat)."""
    out = {**body, "stream": True}
    out["max_output_tokens" if route == RESPONSES else "max_tokens"] = max_tokens
    if route == CHAT:
        out["stream_options"] = {"include_usage": True}
    return out
