"""An answer that ended inside its thinking: continued once with the thinking closed, else incomplete.

Pure functions, no I/O. A thinking model sometimes stops before ``</think>`` (an end-of-generation
token while it still thinks: reported on Qwen3.6/3.8, more often with MTP drafting). llama-server
then answers a normal finish (``stop``, ``end_turn``, ``completed``) with no visible content and no
tool call; an agent reads that as "the model is done" and its turn ends with nothing.

What the proxy does instead (models.yaml ``on_reasoning_only``):

* ``continue`` (default), whole answers: the request is sent once more with the answer's reasoning
  as the assistant's prefill and the thinking closed after it (llama-server's
  ``continue_final_message: "content"``: the prompt is the same conversation, then
  ``<think>`` + reasoning + ``</think>``, so the slot's cache holds all of it but the closing tag),
  and the client gets one answer: the first reasoning, then what the continuation wrote. The
  continuation keeps what is left of the client's token budget. Repair kind
  ``thinking_continued``.
* if that also ends with nothing visible, or under ``pass``, or in a stream (its thinking went
  out already): the answer ends with the API's own *incomplete* status, the one clients already
  show as "the answer was cut" and that no client takes for a finished turn (kind
  ``thinking_only_incomplete``):

  =============  ======================================================================
  API            incomplete status
  =============  ======================================================================
  chat, Ollama   ``finish_reason: "length"`` (Ollama ``done_reason: "length"``)
  Messages       ``stop_reason: "max_tokens"``
  Responses      ``status: "incomplete"``, ``incomplete_details.reason: "max_output_tokens"``
  =============  ======================================================================

  A whole answer also carries a ``Warning`` header (:data:`WARNING`). These are the statuses of an
  answer cut by its limit: the only "incomplete" each API has besides
  a content filter (which would blame the user's text). An answer that really reached its limit
  inside its thinking already says so and is left alone.
"""

from __future__ import annotations

import copy
from typing import Any

CONTINUED, INCOMPLETE = "thinking_continued", "thinking_only_incomplete"
#: the ``Warning`` header (RFC 7234's miscellaneous warning, code 199) of a whole answer marked cut
WARNING = '199 orchestrator "the model stopped inside its thinking and wrote no answer; ended as cut"'
_CHAT_LIMITS = ("max_completion_tokens", "max_tokens", "n_predict")


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip()) or value == []


# --- chat -----------------------------------------------------------------------------------


def chat_ended_in_thinking(body: dict[str, Any]) -> bool:
    """Whether every choice of a whole chat answer finished normally (``stop``) with no content and
    no tool call."""
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        return False
    for choice in choices:
        msg = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(msg, dict) or choice.get("finish_reason") != "stop":
            return False
        if not _blank(msg.get("content")) or msg.get("tool_calls"):
            return False
    return True


def _reasoning(body: dict[str, Any]) -> str:
    msg = (body.get("choices") or [{}])[0].get("message") or {}
    value = msg.get("reasoning_content")
    return value if isinstance(value, str) else ""


def _left(limit: Any, used: Any) -> Any:
    """What is left of a token limit after ``used`` tokens (the limit itself when unknown)."""
    if type(limit) is int and limit > 0 and type(used) is int:
        return max(1, limit - used)
    return limit


def chat_continuation(body: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """The chat request that continues ``answer`` (of request ``body``) with its thinking closed."""
    out = dict(body)
    prefill = {"role": "assistant", "content": "", "reasoning_content": _reasoning(answer)}
    out["messages"] = [*body.get("messages", []), prefill]
    out["continue_final_message"], out["add_generation_prompt"] = "content", False
    out.pop("n", None)  # one continuation: of the first choice
    used = (answer.get("usage") or {}).get("completion_tokens")
    for key in _CHAT_LIMITS:
        if key in body:
            out[key] = _left(body[key], used)
    return out


def chat_merged(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """The continuation's answer with the first answer's reasoning before it and both usages."""
    out = copy.deepcopy(second)
    for choice in out.get("choices") or []:
        msg = choice.get("message")
        if isinstance(msg, dict):
            more = msg.get("reasoning_content")
            msg["reasoning_content"] = _reasoning(first) + (more if isinstance(more, str) else "")
    _add_usage(out, first, "completion_tokens")
    return out


def chat_incomplete(body: dict[str, Any]) -> None:
    """Mark every choice of a whole chat answer cut (``finish_reason: "length"``), in place."""
    for choice in body.get("choices") or []:
        if isinstance(choice, dict):
            choice["finish_reason"] = "length"


def _add_usage(out: dict[str, Any], first: dict[str, Any], key: str) -> None:
    usage, before = out.get("usage"), (first.get("usage") or {}).get(key)
    if isinstance(usage, dict) and type(usage.get(key)) is int and type(before) is int:
        usage[key] += before
        if type(usage.get("total_tokens")) is int:
            usage["total_tokens"] += before


# --- Anthropic Messages ---------------------------------------------------------------------


def messages_ended_in_thinking(message: dict[str, Any]) -> bool:
    """Whether a whole Message ended its turn with no text and no tool use."""
    if message.get("type") != "message" or message.get("stop_reason") != "end_turn":
        return False
    for block in message.get("content") or []:
        if isinstance(block, dict) and (block.get("type") == "tool_use" or not _blank(block.get("text"))):
            return False
    return True


def _thinking(message: dict[str, Any]) -> str:
    blocks = message.get("content") or []
    return "".join(b.get("thinking") or "" for b in blocks if isinstance(b, dict) and b.get("type") == "thinking")


def messages_continuation(body: dict[str, Any], message: dict[str, Any]) -> dict[str, Any] | None:
    """The Messages request that continues ``message`` with its thinking closed (None when it
    thought nothing: llama-server drops an assistant turn with nothing in it)."""
    thought = _thinking(message)
    if not thought.strip():
        return None
    prefill = {"role": "assistant", "content": [{"type": "thinking", "thinking": thought, "signature": ""}]}
    out = {**body, "messages": [*body.get("messages", []), prefill]}
    out["continue_final_message"], out["add_generation_prompt"] = "content", False
    out["max_tokens"] = _left(body.get("max_tokens"), (message.get("usage") or {}).get("output_tokens"))
    return out


def messages_merged(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """The continuation's Message after the first one's thinking blocks, with both usages."""
    out = copy.deepcopy(second)
    thinking = [b for b in first.get("content") or [] if isinstance(b, dict) and b.get("type") == "thinking"]
    rest = [b for b in out.get("content") or [] if not (isinstance(b, dict) and b.get("type") == "thinking")]
    out["content"] = [*copy.deepcopy(thinking), *rest]
    _add_usage(out, first, "output_tokens")
    return out


def messages_incomplete(message: dict[str, Any]) -> None:
    """Mark a whole Message (or a ``message_delta``'s ``delta``) cut, in place."""
    message["stop_reason"] = "max_tokens"


# --- Responses ------------------------------------------------------------------------------


def responses_ended_in_thinking(response: dict[str, Any]) -> bool:
    """Whether a whole Response completed with no output text and no call."""
    if response.get("object") != "response" or response.get("status") != "completed":
        return False
    for item in response.get("output") or []:
        if not isinstance(item, dict) or item.get("type") == "reasoning":
            continue
        if item.get("type") != "message":
            return False  # a function call, a custom tool call...
        if any(not _blank(part.get("text")) for part in item.get("content") or [] if isinstance(part, dict)):
            return False
    return True


def _reasoning_items(response: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in response.get("output") or [] if isinstance(i, dict) and i.get("type") == "reasoning"]


def responses_continuation(body: dict[str, Any], response: dict[str, Any]) -> dict[str, Any] | None:
    """The Responses request that continues ``response`` with its thinking closed (None when it
    thought nothing)."""
    text = "".join(
        part.get("text") or ""
        for item in _reasoning_items(response)
        for part in item.get("content") or []
        if isinstance(part, dict)
    )
    if not text.strip():
        return None
    items = body.get("input")
    items = [{"type": "message", "role": "user", "content": items}] if isinstance(items, str) else list(items or [])
    prefill = {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": text}]}
    out = {**body, "input": [*items, prefill]}
    out["continue_final_message"], out["add_generation_prompt"] = "content", False
    if "max_output_tokens" in body:
        used = (response.get("usage") or {}).get("output_tokens")
        out["max_output_tokens"] = _left(body["max_output_tokens"], used)
    return out


def responses_merged(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """The continuation's Response after the first one's reasoning items, with both usages."""
    out = copy.deepcopy(second)
    rest = [i for i in out.get("output") or [] if not (isinstance(i, dict) and i.get("type") == "reasoning")]
    out["output"] = [*copy.deepcopy(_reasoning_items(first)), *rest]
    _add_usage(out, first, "output_tokens")
    return out


def responses_incomplete(response: dict[str, Any]) -> None:
    """Mark a whole Response (or a ``response.completed`` event's) cut, in place."""
    response["status"] = "incomplete"
    response["incomplete_details"] = {"reason": "max_output_tokens"}


# --- streams --------------------------------------------------------------------------------


#: Per API, bytes that an event which can show something (:func:`_shows`) or end the stream
#: normally (:func:`_ends_normally`) always holds, whatever its spacing: JSON keys and string values
#: with their quotes (inside a JSON string every quote is escaped, so generated text cannot fake
#: them; it can only add a needless parse). A reasoning delta holds none of them
#: (``reasoning_content``, ``thinking_delta``, ``response.reasoning_text.delta``).
SIGNS: dict[str, tuple[bytes, ...]] = {
    "chat": (b'"content"', b'"tool_calls"', b'"stop"'),
    "messages": (b'"text"', b'"tool_use"', b'"input_json_delta"', b'"end_turn"'),
    "responses": (b'"response.output_text.delta"', b'"response.output_item.added"', b'"response.completed"'),
}


class ThinkingOnlyStream:
    """A stream repair (``stream_repair.StreamRepair``'s protocol) around ``inner`` that ends a
    stream whose thinking never closed, and that sent nothing visible, with the API's incomplete
    status (``api``: ``chat``, ``messages`` or ``responses``)."""

    def __init__(self, inner: Any, api: str) -> None:
        self.inner, self.api = inner, api
        self.visible = False
        self._signs = SIGNS[api]

    def needs_parse(self, raw: bytes) -> bool:
        """Until something visible went out, the events that may show something or end the stream
        (:data:`SIGNS`: a reasoning delta is relayed as it came, unparsed); then only what
        ``inner`` wants."""
        if self.inner is not None and self.inner.needs_parse(raw):
            return True
        return not self.visible and any(sign in raw for sign in self._signs)

    def repair(self, chunk: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        kinds: list[str] = []
        if self.inner is not None:  # an inner repair takes any event; it only skips the ones it needs not
            chunk, kinds = self.inner.repair(chunk)
        if self.visible:
            return chunk, kinds
        self.visible = _shows(self.api, chunk)
        if not self.visible and _ends_normally(self.api, chunk):
            chunk = copy.deepcopy(chunk)
            _mark(self.api, chunk)
            kinds = [*kinds, INCOMPLETE]
        return chunk, kinds

    def finish(self) -> dict[str, Any] | None:
        return self.inner.finish() if self.inner is not None else None


def _shows(api: str, chunk: dict[str, Any]) -> bool:
    """Whether a streamed event carries visible output (text or a tool call)."""
    kind = chunk.get("type")
    if api == "chat":
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if isinstance(delta, dict) and (not _blank(delta.get("content")) or delta.get("tool_calls")):
                return True
        return False
    if api == "messages":
        block = chunk.get("content_block") if kind == "content_block_start" else None
        delta = chunk.get("delta") if kind == "content_block_delta" else None
        return (isinstance(block, dict) and block.get("type") == "tool_use") or (
            isinstance(delta, dict) and (not _blank(delta.get("text")) or delta.get("type") == "input_json_delta")
        )
    item = chunk.get("item") if kind == "response.output_item.added" else None
    return (kind == "response.output_text.delta" and not _blank(chunk.get("delta"))) or (
        isinstance(item, dict) and item.get("type") not in ("message", "reasoning")
    )


def _ends_normally(api: str, chunk: dict[str, Any]) -> bool:
    if api == "chat":
        return any(isinstance(c, dict) and c.get("finish_reason") == "stop" for c in chunk.get("choices") or [])
    if api == "messages":
        delta = chunk.get("delta")
        ended = isinstance(delta, dict) and delta.get("stop_reason") == "end_turn"
        return chunk.get("type") == "message_delta" and ended
    response = chunk.get("response")
    completed = isinstance(response, dict) and response.get("status") == "completed"
    return chunk.get("type") == "response.completed" and completed


def _mark(api: str, chunk: dict[str, Any]) -> None:
    if api == "chat":
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict) and choice.get("finish_reason") == "stop":
                choice["finish_reason"] = "length"
    elif api == "messages":
        messages_incomplete(chunk["delta"])
    else:
        responses_incomplete(chunk["response"])
