"""Codex's remote compaction: ``POST /v1/responses/compact``, done by the model itself.

Codex (and the OpenAI SDKs) can ask the server to compact a long conversation: the answer is the
conversation's user messages and one ``compaction`` item whose ``encrypted_content`` is opaque to
the client, which replays it in every later request in place of the history it summarises. Here
the model writes the summary: the request becomes a whole ``/v1/responses`` request with the
history and :data:`COMPACT_PROMPT` as the last user turn; the answer's text goes into the item,
encoded (:func:`seal`), and a replayed item is expanded back into a user message carrying the
summary (:func:`expand`, called by the input repair), so the model reads it on every later turn,
always rendered the same way. A ``compaction`` item from another server (OpenAI's encrypted one)
cannot be read and is dropped, as before.

Codex's newer form (``remote_compaction_v2``) asks ``/v1/responses`` itself, with a
``compaction_trigger`` item at the end of the input: the same summary, answered as a response whose
one output item is the ``compaction`` item, whole or streamed (``responses.compaction_stream``).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
import time
from typing import Any

from orchestrator.errors import ApiError

SEAL = "orchestrator-compaction-v1:"
TRIGGER = "compaction_trigger"
_SURROGATE = re.compile("[\ud800-\udfff]")  # a lone one is no text: a sealed summary never holds one
COMPACT_PROMPT = (
    "Summarize the conversation so far for whoever continues this task: the goal, the decisions made, "
    "what was done and its results (files, commands, errors), the current state, and the next steps. "
    "Answer with the summary only."
)
SUMMARY_OPEN, SUMMARY_CLOSE = "<conversation_summary>\n", "\n</conversation_summary>"
SUMMARY_TOKENS = 2048  # the longest summary asked for, unless the client sets max_output_tokens


def seal(summary: str) -> str:
    """The ``encrypted_content`` of a compaction item carrying ``summary`` (opaque to clients)."""
    return SEAL + base64.urlsafe_b64encode(json.dumps({"summary": summary}).encode()).decode()


def expand(item: dict[str, Any]) -> dict[str, Any] | None:
    """A replayed ``compaction`` item as the user message it stands for, or None for one this server
    did not make (nothing here can read it)."""
    sealed = item.get("encrypted_content")
    if not isinstance(sealed, str) or not sealed.startswith(SEAL):
        return None
    try:
        summary = json.loads(base64.urlsafe_b64decode(sealed[len(SEAL) :]))["summary"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise ApiError(400, "a compaction item's encrypted_content is damaged", param="input") from None
    if not isinstance(summary, str) or _SURROGATE.search(summary):
        raise ApiError(400, "a compaction item's encrypted_content is damaged", param="input")
    return {"role": "user", "content": SUMMARY_OPEN + summary + SUMMARY_CLOSE}


def triggered(body: dict[str, Any]) -> bool:
    """Whether a ``/v1/responses`` request ends with a ``compaction_trigger`` item (Codex's
    ``remote_compaction_v2``): it asks for the compaction instead of an answer."""
    items = body.get("input")
    return isinstance(items, list) and bool(items) and isinstance(items[-1], dict) and items[-1].get("type") == TRIGGER


def summary_request(body: dict[str, Any], *, stream: bool = False) -> dict[str, Any]:
    """The ``/v1/responses`` request that asks the model for the summary of ``body``'s input (the
    history as sent, a trailing ``compaction_trigger`` left out, then :data:`COMPACT_PROMPT`).

    Raises:
        ApiError: 400 naming ``input`` when there is nothing to compact (no ``input``, an empty
            string or list, or only a ``compaction_trigger``): the model would summarise nothing,
            holding a slot for up to :data:`SUMMARY_TOKENS` tokens of invention.
    """
    items = body.get("input")
    history: list[Any] = [{"role": "user", "content": items}] if isinstance(items, str) else list(items or [])
    while history and isinstance(history[-1], dict) and history[-1].get("type") == TRIGGER:
        history.pop()
    if (not history or items == "") and not body.get("previous_response_id"):  # that one the repair refuses
        raise ApiError(
            400,
            "'input' is required: the conversation to compact (a string or a non-empty list of items); "
            "there is nothing to compact without it",
            param="input",
            code="missing_required_parameter",
        )
    # previous_response_id stays: the repair refuses it (400), as for any request, rather than
    # summarising part of a history without a word
    out = {k: v for k, v in body.items() if k not in ("stream", "store")}
    out["input"] = [*history, {"role": "user", "content": COMPACT_PROMPT}]
    out["stream"] = stream
    out["reasoning"] = {"effort": "none"}  # the summary is the answer's text: no thinking before it
    out.setdefault("max_output_tokens", SUMMARY_TOKENS)
    return out


def answer_text(response: dict[str, Any]) -> str:
    """The output text of a Responses answer (its messages' ``output_text`` parts)."""
    return "".join(
        part.get("text", "")
        for item in response.get("output") or []
        if isinstance(item, dict) and item.get("type") == "message"
        for part in item.get("content") or []
        if isinstance(part, dict) and part.get("type") == "output_text"
    )


def compaction_item(summary: str) -> dict[str, Any]:
    """One ``compaction`` output item carrying ``summary``."""
    return {"id": f"cmp_{secrets.token_hex(12)}", "type": "compaction", "encrypted_content": seal(summary.strip())}


def as_compaction(response: dict[str, Any]) -> dict[str, Any]:
    """A triggered request's answer: the model's summary as the one ``compaction`` output item."""
    return {**response, "output": [compaction_item(answer_text(response))]}


def compacted(request: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """The ``response.compaction`` object: the request's user messages, then one compaction item
    with the answer's text."""
    history = (request.get("input") or [])[:-1]  # without COMPACT_PROMPT
    users = [_user_message(i, item) for i, item in enumerate(history) if _is_user(item)]
    item = compaction_item(answer_text(answer))
    return {
        "id": answer.get("id") or f"resp_{secrets.token_hex(12)}",
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": [*users, item],
        "usage": answer.get("usage"),
    }


def _is_user(item: Any) -> bool:
    return isinstance(item, dict) and item.get("role") == "user" and item.get("type", "message") == "message"


def _user_message(i: int, item: dict[str, Any]) -> dict[str, Any]:
    content = item.get("content")
    parts = [{"type": "input_text", "text": content}] if isinstance(content, str) else content
    return {"id": f"msg_{i:03d}", "type": "message", "status": "completed", "role": "user", "content": parts}
