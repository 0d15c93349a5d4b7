"""OpenAI chat completions, completions and embeddings: llama-server serves them itself.

==========================  ==========================================================================
route                       before forwarding / on the answer
==========================  ==========================================================================
``/v1/chat/completions``    ``n`` within the model's slots, ``response_format`` checked, chat repair
                            (``request_repair``), llama-server's fields checked with OpenAI ``tools``,
                            drafting off for token probabilities; the answer's reasoning repaired
                            (``response_repair``, ``stream_repair``); an answer that ended inside
                            its thinking continued once, else marked cut (``thinking_only``)
``/v1/completions``         ``response_format`` checked and mapped onto ``json_schema``, ``speculative``
                            flattened, fields checked, drafting off for token probabilities; with
                            ``suffix``, through ``/infill`` (``openai.fim``); ``best_of`` > 1 a 400
``/v1/embeddings``          the ``input`` checked; the answer passed on untouched
==========================  ==========================================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator.errors import ApiError
from orchestrator.serve.adapters.base import Adapter, Generation, Internal
from orchestrator.serve.adapters.plan import BodyPlan, flatten
from orchestrator.serve.adapters.route import Request, Resend, Route, check_n
from orchestrator.serve.openai import fim, shapes
from orchestrator.serve.repair import chat, clock, llama_fields, structured, thinking_only
from orchestrator.serve.repair import response as reasoning
from orchestrator.serve.repair.stream import repair_for_stream
from orchestrator.serve.streaming import SseCodec, StreamCodec

if TYPE_CHECKING:
    from orchestrator.config.schema import ModelConfig


class ChatRoute(Route):
    """llama-server's ``/v1/chat/completions`` (OpenAI chat, and Ollama's chat onto it)."""

    path = "/v1/chat/completions"
    kind = "chat"
    generates = True
    renders_chat = True

    def prepare(self, body: dict[str, Any], model: ModelConfig, policy: chat.RepairPolicy) -> BodyPlan:
        check_n(body, model)
        structured.check(body)
        plan = BodyPlan()
        plan.apply(chat.repair_request(body, policy))
        plan.move_clock(body, policy, clock.chat)
        plan.check_fields(body, openai_tools=True)
        plan.token_probs(body)
        return plan

    def fix(self, req: Request, obj: dict[str, Any]) -> tuple[dict[str, Any], bool] | Resend:
        """Reasoning before a bare ``</think>`` moves to ``reasoning_content``; an answer that ended
        inside its thinking is continued once or marked cut (``repair.thinking_only``), or resent
        once without thinking when the model's ``on_reasoning_only`` says so."""
        fixed, kinds = reasoning.repair_response(obj, thinking=req.thinking)
        for kind in kinds:
            req.count_repair(kind)
        if req.continued is not None:  # the continuation's answer: after the first one's reasoning
            fixed = thinking_only.chat_merged(req.continued, fixed)
        elif not (req.thinking and thinking_only.chat_ended_in_thinking(fixed)):
            return fixed, fixed is not obj
        elif req.attempt == 1 and req.model.on_reasoning_only == "continue":
            req.count_repair(thinking_only.CONTINUED)
            req.continued = fixed
            # thinking=True: the continuation is the same thinking answer; its reasoning stays reasoning
            return Resend(thinking_only.chat_continuation(req.body, fixed), thinking=True)
        elif req.attempt == 1 and req.model.on_reasoning_only == "retry_without_thinking":
            req.count_repair("reasoning_only_retried")
            body = dict(req.body)
            body["chat_template_kwargs"] = {**(body.get("chat_template_kwargs") or {}), "enable_thinking": False}
            return Resend(body, thinking=False)
        if thinking_only.chat_ended_in_thinking(fixed):
            req.count_repair(thinking_only.INCOMPLETE)
            req.warn(thinking_only.WARNING)
            fixed = dict(fixed) if fixed is obj else fixed
            fixed["choices"] = [dict(c) for c in fixed["choices"]]
            thinking_only.chat_incomplete(fixed)
        return fixed, True

    def chat_request(self, body: dict[str, Any]) -> dict[str, Any]:
        return body  # the repaired chat body is the chat request

    def stream_repair(self, req: Request) -> Any:
        return repair_for_stream(req.body, req.thinking, req.model.extra_args)


class CompletionsRoute(Route):
    """llama-server's ``/v1/completions`` (and its ``/infill``, same fields)."""

    path = "/v1/completions"
    kind = "completions"
    generates = True

    def prepare(self, body: dict[str, Any], model: ModelConfig, policy: chat.RepairPolicy) -> BodyPlan:
        if self.kind == "completions" and body.get("prompt") is None:
            # llama-server answered "[json.exception.out_of_range.403] key 'prompt' not found"
            raise ApiError(400, "prompt is required: the text (or token ids) to continue", param="prompt")
        structured.check(body)
        plan = BodyPlan()
        plan.apply(flatten(body, policy))
        plan.native_format(body)
        plan.check_fields(body, openai_tools=True)
        plan.token_probs(body)
        return plan


class FillInRoute(CompletionsRoute):
    """The route of a completion with ``suffix``: llama-server's ``/infill`` (``openai.fim``),
    whose "not supported" is a 400 naming ``suffix``."""

    path = fim.INFILL_PATH
    kind = "infill"

    def upstream_error(self, err: ApiError) -> ApiError:
        return fim.not_available(err)


class EmbeddingsRoute(Route):
    """llama-server's ``/v1/embeddings``: the ``input`` checked, the answer untouched."""

    path = "/v1/embeddings"
    kind = "embeddings"

    def prepare(self, body: dict[str, Any], model: ModelConfig, policy: chat.RepairPolicy) -> BodyPlan:
        llama_fields.check_embedding_input(body)
        return BodyPlan()


CHAT, COMPLETIONS, FILL_IN, EMBEDDINGS = ChatRoute(), CompletionsRoute(), FillInRoute(), EmbeddingsRoute()


class ChatCompletions(Generation):
    """``POST /v1/chat/completions``."""

    path = "/v1/chat/completions"
    kind = "chat"
    shape = shapes.CHAT
    route = CHAT


class Completions(Generation):
    """``POST /v1/completions``: with ``suffix``, through llama-server's ``/infill``."""

    path = "/v1/completions"
    kind = "completions"
    shape = shapes.COMPLETIONS
    route = COMPLETIONS

    def translate(self, body: dict[str, Any], raw: bytes) -> Internal:
        fim.check_best_of(body)
        if fim.wants_infill(body):
            return Internal(FILL_IN.path, fim.infill_body(body), FILL_IN)
        return super().translate(body, raw)

    def fix(self, req: Request, obj: dict[str, Any]) -> tuple[dict[str, Any], bool] | Resend:
        if req.call.route is FILL_IN and "content" in obj:
            req.count_repair("suffix_infill")
            return fim.CompletionShape(req.model.name).whole(obj), True
        return super().fix(req, obj)

    def codec(self, req: Request, route: Route) -> StreamCodec:
        if route is FILL_IN:
            return SseCodec(self.flavor, fim.InfillStream(req.model.name))
        return super().codec(req, route)


class Embeddings(Adapter):
    """``POST /v1/embeddings``: the answer untouched."""

    path = "/v1/embeddings"
    kind = "embeddings"
    shape = shapes.EMBEDDINGS
    route = EMBEDDINGS
