"""What a route's checks and repairs decided for one request (:class:`BodyPlan`), and what the
answer side keeps of it (:class:`AnswerFix`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.serve.drafting.fields import flatten_speculative
from orchestrator.serve.repair import chat, clock, llama_fields, structured
from orchestrator.serve.repair.token_probs import drafting_off, wants_token_probs, widen


class AnswerFix(Protocol):
    """The answer side of an API whose answer needs what its request side learned (Responses:
    the limits that may cut the answer and the client's tools as mapped for llama-server, mapped
    once). Made by the route's ``prepare`` (:attr:`BodyPlan.answer_fix`), carried by the request's
    ``Call``, read by that API's whole-answer fix and stream repair."""

    def fix(self, answer: dict[str, Any]) -> str | None:
        """Fix a whole answer or one streamed event in place; the repair kind, or None."""
        ...


@dataclass
class BodyPlan:
    """What a route's ``prepare`` (``orchestrator.serve.adapters.route.Route.prepare``) decided for one request.

    Attributes:
        body: the body to send, or None to send the body as it came.
        thinking: whether the generation prompt opens a ``<think>`` block.
        repairs: repair kinds applied (for metrics).
        drafting_off: the reason drafting was turned off for this request, or None.
        trim_top: the answer's candidate lists must be emptied (``token_probs.widen`` asked for one).
        answer_fix: the answer side's fix (:class:`AnswerFix`), when the answer needs what the
            request side learned (Responses: its tool map and limits), so nothing is mapped twice.
    """

    body: dict[str, Any] | None = None
    thinking: bool = False
    repairs: list[str] = field(default_factory=list)
    drafting_off: str | None = None
    trim_top: bool = False
    answer_fix: AnswerFix | None = None

    def current(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body as it stands: repaired, else ``body``."""
        return self.body if self.body is not None else body

    def apply(self, result: chat.RepairResult) -> None:
        """Take a repair's result (``request_repair``, ``anthropic``, ``responses``)."""
        self.thinking = result.thinking
        if result.changed:
            self.body = result.body
            self.repairs.extend(result.repairs)

    def move_clock(
        self, body: dict[str, Any], policy: chat.RepairPolicy, move: Callable[[dict[str, Any]], Any]
    ) -> None:
        """With the model's ``cache.stable_system``, the system prompt's clock lines moved to the end of
        the prompt by ``move`` (one API's function of ``orchestrator.serve.repair.clock``)."""
        if not policy.stable_system:
            return
        moved = move(self.current(body))
        if moved is not None:
            self.body = moved
            self.repairs.append(clock.KIND)

    def native_format(self, body: dict[str, Any]) -> None:
        """``response_format`` mapped onto llama-server's ``json_schema`` (completions, infill)."""
        mapped = structured.to_native(self.current(body))
        if mapped is not None:
            self.body = mapped
            self.repairs.append("response_format_mapped")

    def check_fields(self, body: dict[str, Any], *, openai_tools: bool) -> None:
        """llama-server's fields of the body to send, checked (``orchestrator.serve.repair.llama_fields``)."""
        fixed = llama_fields.check(self.current(body), openai_tools=openai_tools)
        if fixed is not None:
            self.body = fixed
            self.repairs.append("null_dropped")

    def token_probs(self, body: dict[str, Any]) -> None:
        """A request for per-token probabilities runs with drafting off (``orchestrator.serve.repair.token_probs``)."""
        if not wants_token_probs(body):
            return
        current = self.current(body)
        widened = widen(current)
        self.trim_top = widened is not None
        self.body = drafting_off(widened if widened is not None else current)
        self.drafting_off = "token_probs"


def flatten(body: dict[str, Any], _policy: chat.RepairPolicy) -> chat.RepairResult:
    """``"speculative": {"n_max": K}`` flattened, for bodies without messages (completions, infill)."""
    flat = flatten_speculative(body)
    if flat is None:
        return chat.RepairResult(body=body, changed=False)
    return chat.RepairResult(body=flat, changed=True, repairs=["speculative_flattened"])
