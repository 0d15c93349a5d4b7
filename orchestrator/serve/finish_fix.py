"""Why an answer ended, where llama-server's Anthropic and Responses conversions say it wrong.

Both are fixed in the answer, whole or streamed (the ``message_delta`` event, the
``response.completed`` event), and counted as repairs:

- Anthropic (``/v1/messages``): an answer ended by one of the request's ``stop_sequences`` has
  ``stop_reason: "end_turn"`` next to ``stop_sequence: "<the sequence>"``: llama-server's
  ``to_json_anthropic`` and ``to_json_anthropic_stream`` (``tools/server/server-task.cpp``) map a
  stop word like an end-of-generation token. Anthropic's API says ``"stop_sequence"``; a client
  that branches on ``stop_reason`` would take a cut answer for a finished turn.
- Responses (``/v1/responses``): an answer cut by a limit has ``status: "completed"`` and no
  ``incomplete_details`` (llama-server writes ``completed`` always); OpenAI's API says ``status:
  "incomplete"``, ``incomplete_details: {"reason": "max_output_tokens"}``. llama-server's answer
  carries no stop type, so reaching any limit is read as the cut (an end-of-generation token sampled
  exactly at the last allowed position reads as a cut too): the request's ``max_output_tokens``, the
  model's server-side ``-n``/``--n-predict`` (``extra_args``), or the end of the slot's context
  (input plus output tokens reach ``ctx_size / parallel``). A stream keeps its ``response.completed``
  event name: clients and the relay wait for it.
- Responses tool calls of tools the request repair mapped (``orchestrator.serve.responses_tools``):
  a call of a ``namespace`` function comes back with its ``name`` and ``namespace``, a call of a
  ``custom`` tool as a ``custom_tool_call``, in the whole answer, in ``response.output_item.*``
  events and in the ``response.completed`` event's output.

Anthropic message ids: llama-server answers ``"id": "chatcmpl-..."`` (its chat id); Anthropic's
start with ``msg_``. The whole Message's id and the ``message_start`` event's are rewritten to
``msg_<same random part>`` (not counted as a repair: every answer has one).

And one fix to every Responses stream event: llama-server's lack ``sequence_number``,
``output_index`` and ``content_index``, which OpenAI's event schema requires; the ``openai`` SDK's
``client.responses.stream()`` indexes its output list with them and fails on the first text
delta (``TypeError: list indices must be integers or slices, not NoneType``). They are added,
counted from the events themselves; a field the server sent is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.errors import ApiError
from orchestrator.serve.body import dump_body
from orchestrator.serve.responses_tools import ToolMap, client_call, map_tools, remap_output

if TYPE_CHECKING:
    from orchestrator.config.schema import ModelConfig

MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"


def fix_anthropic(message: dict[str, Any]) -> bool:
    """Set ``stop_reason`` to ``stop_sequence`` where a stop sequence ended ``message`` (a whole
    Message or a ``message_delta``'s ``delta``). Returns whether it changed."""
    if message.get("stop_reason") == "end_turn" and isinstance(message.get("stop_sequence"), str):
        message["stop_reason"] = "stop_sequence"
        return True
    return False


@dataclass(frozen=True)
class Limits:
    """What may cut a Responses answer: the request's ``max_output_tokens``, the server's ``-n``, the
    slot's context (None: no such limit)."""

    max_output_tokens: int | None = None
    n_predict: int | None = None
    slot_ctx: int | None = None


def n_predict(extra_args: Sequence[str]) -> int | None:
    """llama-server's ``-n``/``--n-predict`` from ``extra_args`` (None when absent or unlimited)."""
    value = None
    for j, arg in enumerate(extra_args):
        for flag in ("-n", "--n-predict", "--predict"):
            if arg == flag and j + 1 < len(extra_args):
                value = extra_args[j + 1]
            elif arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
    try:
        n = int(value) if value is not None else -1
    except ValueError:
        return None
    return n if n > 0 else None


def limits(request: dict[str, Any], model: ModelConfig | None) -> Limits:
    """The limits of ``request`` on ``model``."""
    mot = request.get("max_output_tokens")
    mot = mot if type(mot) is int and mot > 0 else None
    if model is None:
        return Limits(mot)
    return Limits(mot, n_predict(model.extra_args), model.ctx_size // model.parallel)


def fix_response(response: dict[str, Any], limit: Limits | Any) -> bool:
    """Mark ``response`` incomplete when it reached one of its limits (a :class:`Limits`, or the
    request's ``max_output_tokens`` alone). Returns whether it changed."""
    if not isinstance(limit, Limits):
        limit = Limits(limit if type(limit) is int and limit > 0 else None)
    usage = response.get("usage")
    if response.get("status") != "completed" or not isinstance(usage, dict):
        return False
    used, prompt = usage.get("output_tokens"), usage.get("input_tokens")
    if type(used) is not int:
        return False
    caps = [c for c in (limit.max_output_tokens, limit.n_predict) if c is not None]
    cut = any(used >= c for c in caps)
    if limit.slot_ctx is not None and type(prompt) is int and prompt + used >= limit.slot_ctx:
        cut = True
    if not cut:
        return False
    response["status"] = "incomplete"
    response["incomplete_details"] = {"reason": "max_output_tokens"}
    return True


def fix_message_id(message: dict[str, Any]) -> bool:
    """Give ``message`` (a whole Message or ``message_start``'s ``message``) an Anthropic id:
    llama-server's ``to_json_anthropic`` reuses its chat id ``chatcmpl-<random>``; Anthropic's start
    with ``msg_``. Returns whether it changed."""
    mid = message.get("id")
    if not isinstance(mid, str) or mid.startswith("msg_"):
        return False
    message["id"] = "msg_" + mid.removeprefix("chatcmpl-")
    return True


def _fix(path: str, obj: dict[str, Any], limit: Limits, tools: ToolMap) -> str | None:
    """Fix a whole answer (or a streamed event) of ``path`` in place; the repair kind, or None."""
    if path == MESSAGES:
        if obj.get("type") == "message_start" and isinstance(obj.get("message"), dict):
            fix_message_id(obj["message"])  # every answer has one: fixed, not counted as a repair
            return None
        if obj.get("type") == "message":
            fix_message_id(obj)
        delta = obj.get("delta") if obj.get("type") == "message_delta" else obj
        return "anthropic_stop_sequence" if isinstance(delta, dict) and fix_anthropic(delta) else None
    if path == RESPONSES:
        response = obj.get("response") if obj.get("type") == "response.completed" else obj
        mapped = _client_calls(obj, response, tools)
        if isinstance(response, dict) and fix_response(response, limit):
            return "responses_incomplete"
        return "tool_calls_mapped" if mapped else None
    return None


def _client_calls(obj: dict[str, Any], response: Any, tools: ToolMap) -> bool:
    """The model's calls of mapped tools, in the client's form (an event's item, an output list)."""
    if not (tools.namespaced or tools.custom):
        return False
    item = obj.get("item")
    if isinstance(item, dict):
        new = client_call(item, tools)
        if new is not None:
            obj["item"] = new
            return True
    return isinstance(response, dict) and remap_output(response.get("output"), tools)


def _tool_map(path: str, request: dict[str, Any]) -> ToolMap:
    if path != RESPONSES:
        return ToolMap()
    try:
        return map_tools(request.get("tools"))
    except ApiError:  # the request repair refused such tools already
        return ToolMap()


def fix_answer(
    path: str,
    obj: dict[str, Any],
    request: dict[str, Any],
    data: bytes,
    count: Callable[[str], Any],
    model: ModelConfig | None = None,
) -> bytes:
    """The bytes to send for the whole answer ``obj`` (parsed from ``data``) to the client's
    ``request`` on ``path`` (served by ``model``). ``count`` is called with the repair kind."""
    before = obj.get("id")
    kind = _fix(path, obj, limits(request, model), _tool_map(path, request))
    if kind is not None:
        count(kind)
    elif obj.get("id") == before:
        return data
    return dump_body(obj)


_ITEM_EVENTS = ("response.output_item.", "response.function_call_arguments.")
_PART_EVENTS = ("response.content_part.", "response.output_text.", "response.reasoning_text.")


class FinishStream:
    """A stream repair (the protocol of ``stream_repair.StreamRepair``): the event that ends the
    answer, and (Responses) the indexes every event should carry."""

    def __init__(self, path: str, request: dict[str, Any], model: ModelConfig | None = None) -> None:
        self.path, self.request = path, request
        self.limits, self.tools = limits(request, model), _tool_map(path, request)
        self.marker = b'"stop_sequence":"' if path == MESSAGES else b"data: "
        self.start = b'"message_start"' if path == MESSAGES else b"data: "
        self.sequence = 0
        self.item = -1  # output_index of the current output item
        self.part = -1  # content_index of the current part of that item

    def needs_parse(self, raw: bytes) -> bool:
        """Whether ``raw`` may hold an event to fix (holds for every substring of such bytes)."""
        return self.path == RESPONSES or self.marker in raw or self.start in raw

    def repair(self, chunk: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """A fixed copy of ``chunk`` and the repair kinds, or ``chunk`` itself and none."""
        import copy

        fixed = copy.deepcopy(chunk)
        kind = _fix(self.path, fixed, self.limits, self.tools)
        numbered = self.path == RESPONSES and self._number(fixed)
        renamed = fixed.get("message") != chunk.get("message") or kind == "tool_calls_mapped"
        if kind is None and not numbered and not renamed:
            return chunk, []
        return fixed, [kind] if kind is not None else []

    def _number(self, event: dict[str, Any]) -> bool:
        """Add the missing ``sequence_number``, ``output_index``, ``content_index`` to ``event``."""
        kind = str(event.get("type", ""))
        if kind == "response.output_item.added":
            self.item, self.part = self.item + 1, -1
        elif kind == "response.content_part.added":
            self.part += 1
        before = len(event)
        event.setdefault("sequence_number", self.sequence)
        self.sequence += 1
        if kind.startswith(_ITEM_EVENTS + _PART_EVENTS):
            event.setdefault("output_index", max(self.item, 0))
        if kind.startswith(_PART_EVENTS):
            event.setdefault("content_index", max(self.part, 0))
        return len(event) != before

    def finish(self) -> dict[str, Any] | None:
        """Nothing is held back."""
        return None


def for_stream(path: str, request: dict[str, Any], model: ModelConfig | None = None) -> FinishStream | None:
    """The stream repair for the client's ``request`` on ``path`` (None for routes whose finish needs no fix)."""
    return FinishStream(path, request, model) if path in (MESSAGES, RESPONSES) else None
