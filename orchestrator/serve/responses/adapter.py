"""OpenAI Responses (``/v1/responses``, ``/v1/responses/input_tokens``): llama-server serves both;
the request is repaired by ``orchestrator.serve.responses.repair``, and the answer fixed where
llama-server says it wrong, whole or streamed (``orchestrator.serve.responses.answer``):

- an answer cut by a limit has ``status: "completed"`` and no ``incomplete_details``
  (llama-server writes ``completed`` always); OpenAI's API says ``status: "incomplete"``,
  ``incomplete_details: {"reason": "max_output_tokens"}``. llama-server's answer carries no stop
  type, so reaching any limit is read as the cut (an end-of-generation token sampled exactly at
  the last allowed position reads as a cut too): the request's ``max_output_tokens``, the model's
  server-side ``-n``/``--n-predict`` (``extra_args``), or the end of the slot's context (input
  plus output tokens reach ``ctx_size / parallel``). A stream keeps its ``response.completed``
  event name: clients and the relay wait for it. Counted as the repair ``responses_incomplete``.
- tool calls of tools the request repair mapped (``orchestrator.serve.responses.tools``): a call
  of a ``namespace`` function comes back with its ``name`` and ``namespace``, a call of a
  ``custom`` tool as a ``custom_tool_call``, in the whole answer, in ``response.output_item.*``
  events and in the ``response.completed`` event's output (``tool_calls_mapped``).
- ``store: true``: the completed (or incomplete) response is kept (``orchestrator.serve.responses.stored``)
  and says ``store: true``; a later ``previous_response_id`` is resolved from it before routing
  (:func:`recall`).
- every stream event: llama-server's lack ``sequence_number``, ``output_index`` and
  ``content_index``, which OpenAI's event schema requires; the ``openai`` SDK's
  ``client.responses.stream()`` indexes its output list with them and fails on the first text
  delta (``TypeError: list indices must be integers or slices, not NoneType``). They are added,
  counted from the events themselves; a field the server sent is kept.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orchestrator.errors import ApiError
from orchestrator.serve.adapters.base import Adapter, Generation, Internal
from orchestrator.serve.adapters.plan import BodyPlan
from orchestrator.serve.adapters.route import Request, Resend, Route
from orchestrator.serve.repair import clock, structured, thinking_only
from orchestrator.serve.responses import compaction, stored
from orchestrator.serve.responses import repair as responses
from orchestrator.serve.responses.answer import ResponsesAnswer, ResponsesStreamFix, fix_incomplete
from orchestrator.serve.responses.chat_view import responses_chat
from orchestrator.serve.responses.compaction_stream import CompactionStream
from orchestrator.serve.responses.items import hosted_item
from orchestrator.serve.responses.shapes import RESPONSES
from orchestrator.serve.responses.tools import ToolMap
from orchestrator.serve.streaming import StreamCodec, StreamFlavor

if TYPE_CHECKING:
    from orchestrator.config.schema import ModelConfig
    from orchestrator.serve.repair import chat
    from orchestrator.serve.responses.stored import ResponseStore


def _error_event(err: ApiError) -> bytes:
    """A stream that fails after its head: ``response.failed`` (what Codex reads as a failed turn;
    it stops there), then Responses' ``error`` event (whose nested OpenAI envelope makes the openai
    SDK raise ``APIError``), never a normal end."""
    response = {
        "id": f"resp_{secrets.token_hex(12)}",
        "object": "response",
        "status": "failed",
        "error": {"code": err.code or "server_error", "message": err.message},
        "output": [],
    }
    failed = {"type": "response.failed", "response": response}
    body = {"type": "error", "code": err.code, "message": err.message, "param": err.param, **err.body()}
    return (
        b"event: response.failed\ndata: " + json.dumps(failed).encode() + b"\n\n"
        b"event: error\ndata: " + json.dumps(body).encode() + b"\n\n"
    )


log = logging.getLogger(__name__)
RESPONSES_SSE = StreamFlavor(None, b"event: response.completed", _error_event)


def _repair(body: dict[str, Any], model: ModelConfig, policy: chat.RepairPolicy) -> BodyPlan:
    plan = BodyPlan()
    result = responses.repair_request(body, policy)
    plan.apply(result)
    plan.move_clock(body, policy, clock.responses)
    tools = result.tools
    plan.answer_fix = ResponsesAnswer.of(body, model, tools)
    if "hosted_tool_skipped" in result.repairs or "hosted_item_skipped" in result.repairs:
        _log_skipped_once(model.name, body, tools)
    plan.check_fields(body, openai_tools=False)
    return plan


_SKIPPED_LOGGED: set[tuple[str, str]] = set()


def _log_skipped_once(model: str, body: dict[str, Any], tools: ToolMap) -> None:
    """Say once per model and tool type that hosted tools were left out (the metric counts each)."""
    for ttype in tools.skipped:
        if (model, ttype) not in _SKIPPED_LOGGED:
            _SKIPPED_LOGGED.add((model, ttype))
            log.warning("%s: Responses tool type %r is not run by this server; skipped (the model answers without it)",
                        model, ttype)  # fmt: skip
    items = body.get("input")
    for item in items if isinstance(items, list) else ():
        itype = hosted_item(item)
        if itype is not None and (model, itype) not in _SKIPPED_LOGGED:
            _SKIPPED_LOGGED.add((model, itype))
            log.warning("%s: replayed Responses item type %r is not read by this server; skipped", model, itype)


def recall(req: Request, internal: Internal) -> Internal:
    """``previous_response_id`` resolved from the endpoint's store (``responses.stored``): the
    stored conversation and output go in front of ``input``, and the stored response's model
    serves it unless the request names one.

    Raises:
        ApiError: 404 ``response_not_found`` (param ``previous_response_id``) for an id not stored.
    """
    body = internal.body
    rid = body.get("previous_response_id")
    if rid is None or rid == "":
        return internal
    if not isinstance(rid, str):
        raise ApiError(400, "previous_response_id must be a string", param="previous_response_id")
    store: ResponseStore | None = req.responses_store
    found = store.get(rid) if store is not None else None
    if found is None:
        raise stored.not_found(rid, "previous_response_id")
    out = {k: v for k, v in body.items() if k != "previous_response_id"}
    out["input"] = found.conversation() + stored.input_items(body.get("input"))
    if out.get("model") in (None, ""):
        out["model"] = found.model
    return Internal(internal.path, out, internal.route)


def _keeper(req: Request) -> Callable[[dict[str, Any]], None] | None:
    """What stores this request's answer (``store: true`` on ``/v1/responses``), or None."""
    body = req.client_body
    store: ResponseStore | None = getattr(req, "responses_store", None)
    if body.get("store") is not True or store is None:
        return None

    def keep(response: dict[str, Any]) -> None:
        if response.get("status") in ("completed", "incomplete"):
            response["store"] = store.put(response, stored.input_items(body.get("input")), req.model.name)
        else:
            response["store"] = False

    return keep


def _answer(req: Request) -> ResponsesAnswer:
    """The answer side its prepare made (made here for a request that was not prepared here)."""
    made = req.call.answer_fix
    return made if isinstance(made, ResponsesAnswer) else ResponsesAnswer.of(req.client_body, req.model)


class ResponsesRoute(Route):
    """llama-server's ``/v1/responses``."""

    path = "/v1/responses"
    kind = "responses"
    generates = True
    renders_chat = True

    def prepare(self, body: dict[str, Any], model: ModelConfig, policy: chat.RepairPolicy) -> BodyPlan:
        structured.check(body)
        return _repair(body, model, policy)

    def fix(self, req: Request, obj: dict[str, Any]) -> tuple[dict[str, Any], bool] | Resend:
        answer = _answer(req)
        first = req.continued
        if first is not None:  # the continuation's answer: after the first one's reasoning
            obj = thinking_only.responses_merged(first, obj)
        kind = answer.fix(obj)
        if kind is not None:
            req.count_repair(kind)
        ended = thinking_only.responses_ended_in_thinking(obj) and (req.thinking or first is not None)
        if ended and first is None and req.attempt == 1 and req.model.on_reasoning_only == "continue":
            again = thinking_only.responses_continuation(req.body, obj)
            if again is not None:
                req.count_repair(thinking_only.CONTINUED)
                req.continued = obj
                return Resend(again, thinking=True)
        if ended:
            req.count_repair(thinking_only.INCOMPLETE)
            req.warn(thinking_only.WARNING)
            thinking_only.responses_incomplete(obj)
        keep = _keeper(req)
        if keep is not None and obj.get("object") == "response":
            keep(obj)
            return obj, True
        return obj, kind is not None or first is not None or ended

    def chat_request(self, body: dict[str, Any]) -> dict[str, Any]:
        return responses_chat(body)

    def stream_repair(self, req: Request) -> Any:
        return ResponsesStreamFix(_answer(req), _keeper(req))


class InputTokensRoute(Route):
    """llama-server's ``/v1/responses/input_tokens``: repaired like a response."""

    path = "/v1/responses/input_tokens"
    kind = "input_tokens"

    def prepare(self, body: dict[str, Any], model: ModelConfig, policy: chat.RepairPolicy) -> BodyPlan:
        return _repair(body, model, policy)


_ROUTE = ResponsesRoute()


class Responses(Generation):
    """``POST /v1/responses``."""

    path = "/v1/responses"
    kind = "responses"
    route: Route = _ROUTE
    shape = RESPONSES
    flavor = RESPONSES_SSE

    def translate(self, body: dict[str, Any], raw: bytes) -> Internal:
        if compaction.triggered(body):  # Codex's remote_compaction_v2: the summary, as one item
            summary = compaction.summary_request(body, stream=body.get("stream") is True)
            return Internal(_ROUTE.path, summary, _ROUTE, answer=_COMPACTION)
        return super().translate(body, raw)

    async def recall(self, req: Request, internal: Internal) -> Internal:
        return recall(req, internal)


class CompactionAnswer(Responses):
    """The answer to a ``/v1/responses`` request that ends with a ``compaction_trigger`` item
    (``Internal.answer``): its summary request (``responses.compaction``) runs on the Responses
    route, and the summary, whole or streamed, is answered as one ``compaction`` item, never stored."""

    async def recall(self, req: Request, internal: Internal) -> Internal:
        return internal  # the summary request carries the conversation it summarises

    def codec(self, req: Request, route: Route) -> StreamCodec:
        limits = _answer(req).limits
        return CompactionStream(self.flavor, lambda response: fix_incomplete(response, limits))

    def fix(self, req: Request, obj: dict[str, Any]) -> tuple[dict[str, Any], bool] | Resend:
        if obj.get("object") != "response":
            return super().fix(req, obj)  # an error: as any Responses answer's (never stored)
        req.count_repair("compaction_triggered")
        fix_incomplete(obj, _answer(req).limits)  # a summary a limit cut is said to be cut
        return compaction.as_compaction(obj), True


_COMPACTION = CompactionAnswer()


class InputTokens(Adapter):
    """``POST /v1/responses/input_tokens``: answered as llama-server counts."""

    path = "/v1/responses/input_tokens"
    kind = "input_tokens"
    route = InputTokensRoute()
    shape = RESPONSES
    flavor = RESPONSES_SSE

    async def recall(self, req: Request, internal: Internal) -> Internal:
        return recall(req, internal)


class Compact(Generation):
    """``POST /v1/responses/compact`` (Codex's remote compaction): the model writes the summary
    (``responses.compaction``) through a whole ``/v1/responses`` request; the answer is the
    ``response.compaction`` object with one ``compaction`` item that later requests replay."""

    path = "/v1/responses/compact"
    kind = "compact"
    route = _ROUTE
    shape = RESPONSES

    def translate(self, body: dict[str, Any], raw: bytes) -> Internal:
        return Internal(_ROUTE.path, compaction.summary_request(body), _ROUTE)

    def fix(self, req: Request, obj: dict[str, Any]) -> tuple[dict[str, Any], bool] | Resend:
        if obj.get("object") != "response":
            return obj, False  # not an answer to compact (an error passes on as it came)
        return compaction.compacted(req.client_body, obj), True
