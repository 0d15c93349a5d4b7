"""llama-server's own routes, forwarded in OpenAI's error shape.

==========================================  ================================================================
route                                       before forwarding
==========================================  ================================================================
``/v1/chat/completions/input_tokens``,      the chat repair (``request_repair``) and llama-server's fields, so
``/apply-template``                         the count and the template are those of the prompt a chat would get
                                            (a clock moved too, with ``cache.stable_system``)
``/infill``                                 as ``/v1/completions`` (``speculative`` flattened, structured
                                            output mapped, drafting off for token probabilities)
``/v1/rerank``, ``/tokenize``               nothing: body and answer pass untouched
``/detokenize``                             token ids within int32 (llama-server read 2**32 as token 0)
==========================================  ================================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator.serve.adapters.base import Adapter, Generation
from orchestrator.serve.adapters.plan import BodyPlan
from orchestrator.serve.adapters.route import Route
from orchestrator.serve.llama import shapes
from orchestrator.serve.openai.adapter import CompletionsRoute
from orchestrator.serve.openai.shapes import CHAT
from orchestrator.serve.repair import chat, clock, llama_fields

if TYPE_CHECKING:
    from orchestrator.config.schema import ModelConfig


class ChatPrompt(Route):
    """A route that renders a chat's prompt without generating: repaired as a chat request."""

    def prepare(self, body: dict[str, Any], model: ModelConfig, policy: chat.RepairPolicy) -> BodyPlan:
        plan = BodyPlan()
        plan.apply(chat.repair_request(body, policy))
        plan.move_clock(body, policy, clock.chat)
        plan.check_fields(body, openai_tools=True)
        return plan


class Detokenize(Route):
    """``/detokenize``: token ids within int32 (beyond it llama-server wraps them to a valid id)."""

    def prepare(self, body: dict[str, Any], model: ModelConfig, policy: chat.RepairPolicy) -> BodyPlan:
        llama_fields.check_token_ids("tokens", body.get("tokens"))
        return BodyPlan()


def native_routes() -> tuple[Adapter, ...]:
    """One adapter per llama-server route forwarded as its own: the client's path is the route's.
    ``/infill`` is fill-in-the-middle with a completion's fields, its answer accounted like one."""
    own: tuple[tuple[type[Adapter], Route, Any], ...] = (
        (Adapter, ChatPrompt("/v1/chat/completions/input_tokens", "chat_tokens"), CHAT),
        (Adapter, ChatPrompt("/apply-template", "template"), CHAT),
        (Generation, CompletionsRoute("/infill", "infill"), shapes.INFILL),
        (Adapter, Route("/v1/rerank", "rerank"), shapes.RERANK),
        (Adapter, Route("/tokenize", "tokenize"), shapes.TOKENIZE),
        (Adapter, Detokenize("/detokenize", "detokenize"), shapes.DETOKENIZE),
    )
    return tuple(api(route.path, route.kind, shape, route) for api, route, shape in own)
