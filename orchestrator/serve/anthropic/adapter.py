"""Anthropic Messages (``/v1/messages``, ``/v1/messages/count_tokens``): llama-server serves both;
the request is repaired by ``orchestrator.serve.anthropic.repair``, errors take Anthropic's shape, and
two things llama-server says wrong are fixed in the answer, whole or streamed:

- an answer ended by one of the request's ``stop_sequences`` has ``stop_reason: "end_turn"`` next
  to ``stop_sequence: "<the sequence>"``: llama-server's ``to_json_anthropic`` and
  ``to_json_anthropic_stream`` (``tools/server/server-task.cpp``) map a stop word like an
  end-of-generation token. Anthropic's API says ``"stop_sequence"``; a client that branches on
  ``stop_reason`` would take a cut answer for a finished turn. Counted as the repair
  ``anthropic_stop_sequence``.
- ``max_tokens: 0`` (Anthropic's documented cache pre-warm): ``orchestrator.serve.anthropic.prewarm``.
- ``thinking.display: "omitted"``: the answer's thinking blocks keep their (empty) signature and
  lose their text, whole and streamed (``thinking_delta`` events carry ``""``), as Anthropic's API
  answers it; the model still thinks (not counted as a repair: the client asked for it).
- message ids: llama-server answers ``"id": "chatcmpl-..."`` (its chat id); Anthropic's start
  with ``msg_``. The whole Message's id and the ``message_start`` event's are rewritten to
  ``msg_<same random part>`` (not counted as a repair: every answer has one).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from orchestrator.errors import ApiError
from orchestrator.serve.adapters.base import Adapter, Generation
from orchestrator.serve.adapters.plan import BodyPlan
from orchestrator.serve.adapters.route import Request, Resend, Route, session_id
from orchestrator.serve.anthropic import prewarm
from orchestrator.serve.anthropic import repair as anthropic
from orchestrator.serve.anthropic.chat_view import anthropic_chat
from orchestrator.serve.anthropic.shapes import MESSAGES
from orchestrator.serve.repair import clock, structured, thinking_only
from orchestrator.serve.streaming import StreamFlavor

if TYPE_CHECKING:
    from orchestrator.config.schema import ModelConfig
    from orchestrator.serve.repair import chat

ANTHROPIC_SSE = StreamFlavor(None, b"event: message_stop", anthropic.error_event)


def fix_stop_reason(message: dict[str, Any]) -> bool:
    """Set ``stop_reason`` to ``stop_sequence`` where a stop sequence ended ``message`` (a whole
    Message or a ``message_delta``'s ``delta``). Returns whether it changed."""
    if message.get("stop_reason") == "end_turn" and isinstance(message.get("stop_sequence"), str):
        message["stop_reason"] = "stop_sequence"
        return True
    return False


def fix_message_id(message: dict[str, Any]) -> bool:
    """Give ``message`` (a whole Message or ``message_start``'s ``message``) an Anthropic id.
    Returns whether it changed."""
    mid = message.get("id")
    if not isinstance(mid, str) or mid.startswith("msg_"):
        return False
    message["id"] = "msg_" + mid.removeprefix("chatcmpl-")
    return True


def fix_event(obj: dict[str, Any]) -> str | None:
    """Fix a whole Message or one streamed event in place; the repair kind, or None."""
    if obj.get("type") == "message_start" and isinstance(obj.get("message"), dict):
        fix_message_id(obj["message"])  # every answer has one: fixed, not counted as a repair
        return None
    if obj.get("type") == "message":
        fix_message_id(obj)
    delta = obj.get("delta") if obj.get("type") == "message_delta" else obj
    return "anthropic_stop_sequence" if isinstance(delta, dict) and fix_stop_reason(delta) else None


def thinking_omitted(body: dict[str, Any]) -> bool:
    """Whether the request asked for ``thinking.display: "omitted"``: thinking blocks come back
    without their text (their signature kept), as Anthropic's API answers it."""
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("display") == "omitted"


def omit_thinking(obj: dict[str, Any]) -> bool:
    """Empty the text of a whole Message's thinking blocks, or of a ``thinking_delta`` event, in
    place. Returns whether it changed."""
    changed = False
    if obj.get("type") == "message":
        for block in obj.get("content") or []:
            if isinstance(block, dict) and block.get("type") == "thinking" and block.get("thinking"):
                block["thinking"], changed = "", True
    delta = obj.get("delta") if obj.get("type") == "content_block_delta" else None
    if isinstance(delta, dict) and delta.get("type") == "thinking_delta" and delta.get("thinking"):
        delta["thinking"], changed = "", True
    return changed


class MessagesStreamFix:
    """The stream repair (``stream_repair.StreamRepair``'s protocol) of a Messages stream."""

    def __init__(self, *, omit: bool = False) -> None:
        self.omit = omit  # thinking.display "omitted": thinking deltas lose their text

    def needs_parse(self, raw: bytes) -> bool:
        """Whether ``raw`` may hold an event to fix (holds for every substring of such bytes)."""
        return b'"stop_sequence":"' in raw or b'"message_start"' in raw or (self.omit and b'"thinking_delta"' in raw)

    def repair(self, chunk: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """A fixed copy of ``chunk`` and the repair kinds, or ``chunk`` itself and none."""
        fixed = copy.deepcopy(chunk)
        kind = fix_event(fixed)
        omitted = self.omit and omit_thinking(fixed)
        if kind is None and not omitted and fixed.get("message") == chunk.get("message"):
            return chunk, []
        return fixed, [kind] if kind is not None else []

    def finish(self) -> dict[str, Any] | None:
        """Nothing is held back."""
        return None


def _repair(body: dict[str, Any], policy: chat.RepairPolicy) -> BodyPlan:
    plan = BodyPlan()
    plan.apply(anthropic.repair_request(body, policy))
    plan.move_clock(body, policy, clock.anthropic)
    plan.check_fields(body, openai_tools=False)
    return plan


class MessagesRoute(Route):
    """llama-server's ``/v1/messages``."""

    path = "/v1/messages"
    kind = "messages"
    generates = True
    renders_chat = True

    def prepare(self, body: dict[str, Any], model: ModelConfig, policy: chat.RepairPolicy) -> BodyPlan:
        if body.get("max_tokens") is None:
            # Anthropic's API requires it; without it llama-server answers until the slot's context is full
            raise ApiError(400, "max_tokens: Field required (the longest answer, in tokens)", param="max_tokens")
        structured.check_tools(body)
        warm = prewarm.request(body)
        plan = _repair(warm if warm is not None else body, policy)
        if warm is not None:
            plan.body = plan.current(warm)
            plan.repairs.append("anthropic_prewarm")
        return plan

    def fix(self, req: Request, obj: dict[str, Any]) -> tuple[dict[str, Any], bool] | Resend:
        before = obj.get("id")
        kind = fix_event(obj)
        if kind is not None:
            req.count_repair(kind)
        if prewarm.wanted(req.client_body) and obj.get("type") == "message":
            prewarm.answer(obj)
            return obj, True
        changed = kind is not None or obj.get("id") != before
        if req.continued is not None:  # the continuation's answer: after the first one's thinking
            obj, changed = thinking_only.messages_merged(req.continued, obj), True
        elif not (req.thinking and thinking_only.messages_ended_in_thinking(obj)):
            return _shown(req, obj, changed)
        elif req.attempt == 1 and req.model.on_reasoning_only == "continue":
            again = thinking_only.messages_continuation(req.body, obj)
            if again is not None:
                req.count_repair(thinking_only.CONTINUED)
                req.continued = obj
                return Resend(again, thinking=True)
        if thinking_only.messages_ended_in_thinking(obj):
            req.count_repair(thinking_only.INCOMPLETE)
            req.warn(thinking_only.WARNING)
            thinking_only.messages_incomplete(obj)
            changed = True
        return _shown(req, obj, changed)

    def chat_request(self, body: dict[str, Any]) -> dict[str, Any]:
        return anthropic_chat(body)

    def session_key(self, body: dict[str, Any], headers: Sequence[tuple[bytes, bytes]] = ()) -> str | None:
        """``prompt_cache_key`` or Claude Code's session header, else the ``session_id`` in
        ``metadata.user_id`` (a JSON string, as Claude Code sends it: the same id)."""
        meta = body.get("metadata")
        user = meta.get("user_id") if isinstance(meta, dict) else None
        key = super().session_key(body, headers)
        if key is not None or not isinstance(user, str) or not user.startswith("{"):
            return key
        try:
            session = json.loads(user).get("session_id")
        except (ValueError, AttributeError):
            return None
        return session_id("s:", session) if isinstance(session, str) and session else None

    def stream_repair(self, req: Request) -> Any:
        return MessagesStreamFix(omit=thinking_omitted(req.client_body))


class CountTokensRoute(Route):
    """llama-server's ``/v1/messages/count_tokens``: repaired like a Message."""

    path = "/v1/messages/count_tokens"
    kind = "count_tokens"

    def prepare(self, body: dict[str, Any], model: ModelConfig, policy: chat.RepairPolicy) -> BodyPlan:
        return _repair(body, policy)


class Messages(Generation):
    """``POST /v1/messages``."""

    path = "/v1/messages"
    kind = "messages"
    route = MessagesRoute()
    flavor = ANTHROPIC_SSE
    shape = MESSAGES
    error_prefix = "/v1/messages"
    client_header = "anthropic-version"  # Claude Code's gateway model discovery sends it to /v1/models

    def error_body(self, err: ApiError) -> dict[str, Any]:
        return anthropic.error_body(err)


class CountTokens(Adapter):
    """``POST /v1/messages/count_tokens``: answered as llama-server counts."""

    path = "/v1/messages/count_tokens"
    kind = "count_tokens"
    route = CountTokensRoute()
    flavor = ANTHROPIC_SSE
    shape = MESSAGES

    def error_body(self, err: ApiError) -> dict[str, Any]:
        return anthropic.error_body(err)


def _shown(req: Request, obj: dict[str, Any], changed: bool) -> tuple[dict[str, Any], bool]:
    """The answer as the client asked to see it: thinking without its text when display is omitted."""
    omitted = thinking_omitted(req.client_body) and omit_thinking(obj)
    return obj, changed or omitted
