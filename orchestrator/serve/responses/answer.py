"""The answer side of one Responses call (``orchestrator.serve.responses.adapter``): what may cut
the answer (:class:`Limits`) and how the client's tools were mapped, made once per request
(:class:`ResponsesAnswer`, the request's ``AnswerFix``), and the fixes they drive on a whole answer
and on each streamed event (:class:`ResponsesStreamFix`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.errors import ApiError
from orchestrator.serve.responses.tools import ToolMap, client_call, map_tools, remap_output

if TYPE_CHECKING:
    from orchestrator.config.schema import ModelConfig

_ITEM_EVENTS = ("response.output_item.", "response.function_call_arguments.")
_PART_EVENTS = ("response.content_part.", "response.output_text.", "response.reasoning_text.")


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


def fix_incomplete(response: dict[str, Any], limit: Limits | Any) -> bool:
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


def tool_map(request: dict[str, Any]) -> ToolMap:
    """How the client's ``tools`` were mapped for llama-server (empty when none were)."""
    try:
        return map_tools(request.get("tools"))
    except ApiError:  # the request repair refused such tools already
        return ToolMap()


@dataclass(frozen=True)
class ResponsesAnswer:
    """What one Responses request's repair learned that its answer needs: the limits that may cut
    it and the client's tools as mapped for llama-server. Made once in ``prepare``
    (``BodyPlan.answer_fix``, an ``AnswerFix``), read by the whole answer's fix and the stream's."""

    limits: Limits
    tools: ToolMap

    def fix(self, answer: dict[str, Any]) -> str | None:
        """Fix a whole response or one streamed event in place (``AnswerFix``); the repair kind, or None."""
        return _fix(answer, self.limits, self.tools)

    @classmethod
    def of(cls, request: dict[str, Any], model: ModelConfig | None, tools: ToolMap | None = None) -> ResponsesAnswer:
        """The answer side of ``request`` on ``model`` (``tools``: the map the repair made, else made here)."""
        return cls(limits(request, model), tools if tools is not None else tool_map(request))


def _fix(obj: dict[str, Any], limit: Limits, tools: ToolMap) -> str | None:
    """Fix a whole response or one streamed event in place; the repair kind, or None."""
    response = obj.get("response") if obj.get("type") == "response.completed" else obj
    mapped = _client_calls(obj, response, tools)
    if isinstance(response, dict) and fix_incomplete(response, limit):
        return "responses_incomplete"
    return "tool_calls_mapped" if mapped else None


class ResponsesStreamFix:
    """The stream repair (``stream_repair.StreamRepair``'s protocol) of a Responses stream: the
    completed event's status, and the indexes every event should carry."""

    def __init__(self, answer: ResponsesAnswer, keep: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.answer = answer
        self.keep = keep  # stores the completed response (store: true)
        self.sequence = 0
        self.item = -1  # output_index of the current output item
        self.part = -1  # content_index of the current part of that item

    def needs_parse(self, raw: bytes) -> bool:
        """Every event gets its indexes."""
        return True

    def repair(self, chunk: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """A fixed copy of ``chunk`` and the repair kinds, or ``chunk`` itself and none."""
        fixed = copy.deepcopy(chunk)
        kind = self.answer.fix(fixed)
        numbered = self._number(fixed)
        if (
            self.keep is not None
            and fixed.get("type") == "response.completed"
            and isinstance(fixed.get("response"), dict)
        ):
            self.keep(fixed["response"])
            numbered = True  # the response says whether it was stored
        if kind is None and not numbered:
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
