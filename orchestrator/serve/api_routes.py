"""The POST routes the endpoint forwards to llama-server, as data: path, repair, answer handling, stream shape.

Every route is routed by the body's ``model`` (``orchestrator.serve.routing``), takes the same API
keys and body rules (size, ``Content-Encoding``), and is forwarded to the same path on the chosen
replica, which serves it itself at the pin (``tools/server/server.cpp``):

====================================  ============  ==========================================================
route                                 kind          before forwarding
====================================  ============  ==========================================================
``/v1/chat/completions``              chat          chat repair (``request_repair``), drafting off for token probs
``/v1/completions``                   completions   ``speculative`` flattened, drafting off for token probs
``/v1/embeddings``                    embeddings    nothing
``/v1/messages``                      messages      Anthropic repair (``orchestrator.serve.anthropic``)
``/v1/messages/count_tokens``         count_tokens  Anthropic repair
``/v1/responses``                     responses     Responses repair (``orchestrator.serve.responses``)
``/v1/responses/input_tokens``        input_tokens  Responses repair
``/v1/chat/completions/input_tokens`` chat_tokens   chat repair
``/apply-template``                   template      chat repair
``/infill``                           infill        ``speculative`` flattened, drafting off for token probs
``/v1/rerank``                        rerank        nothing
``/tokenize``, ``/detokenize``        tokenize...   nothing
====================================  ============  ==========================================================

Exact answers with drafting on (``orchestrator.serve.token_probs``): a request that asks for
per-token probabilities is sent with ``"speculative.n_max": 0`` (native patch 0002), which turns
drafting off for that request only, and counted in ``orchestrator_drafting_off_total``.

Errors use the route's shape (:func:`error_body`): Anthropic's on ``/v1/messages*``, Ollama's on
``/api/*``, OpenAI's elsewhere.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from orchestrator.errors import ApiError
from orchestrator.serve import anthropic, llama_fields, responses, structured
from orchestrator.serve import request_repair as chat
from orchestrator.serve.responses_tools import map_tools
from orchestrator.serve.speculative_fields import flatten_speculative
from orchestrator.serve.streaming import OPENAI_SSE, StreamFlavor
from orchestrator.serve.token_probs import drafting_off, wants_token_probs, widen

if TYPE_CHECKING:
    from orchestrator.config.schema import ModelConfig

log = logging.getLogger(__name__)
Repair = Callable[[dict[str, Any], chat.RepairPolicy], chat.RepairResult]


def _responses_error_event(err: ApiError) -> bytes:
    # Responses' "error" event; the nested OpenAI envelope makes the openai SDK raise APIError
    body = {"type": "error", "code": err.code, "message": err.message, "param": err.param, **err.body()}
    return b"event: error\ndata: " + json.dumps(body).encode() + b"\n\n"


ANTHROPIC_SSE = StreamFlavor(None, b"event: message_stop", anthropic.error_event)
RESPONSES_SSE = StreamFlavor(None, b"event: response.completed", _responses_error_event)


@dataclass(frozen=True)
class ApiRoute:
    """One forwarded POST route.

    Attributes:
        path: the path clients call, and llama-server's path for it.
        kind: the ``endpoint`` label in metrics.
        repair: the request repair, or None to forward the body as is.
        answer: ``chat`` (timings, reasoning repair, retry), ``usage`` (timings, else usage tokens)
            or ``plain`` (passed on untouched).
        flavor: the stream shape.
        token_probs: whether the body can ask for per-token probabilities (see module docstring).
        structured: how ``response_format`` is handled (``orchestrator.serve.structured``):
            ``chat`` checked, ``native`` checked and mapped onto ``json_schema``, None untouched.
        fields: which of llama-server's fields are checked before forwarding
            (``orchestrator.serve.llama_fields``): ``openai`` all of them with OpenAI's ``tools``,
            ``other`` all but ``tools`` (Anthropic, Responses), ``embeddings`` the ``input``.
    """

    path: str
    kind: str
    repair: Repair | None = None
    answer: Literal["chat", "usage", "plain"] = "plain"
    flavor: StreamFlavor = OPENAI_SSE
    token_probs: bool = False
    structured: Literal["chat", "native"] | None = None
    fields: Literal["openai", "other", "embeddings"] | None = None


def _flatten(body: dict[str, Any], _policy: chat.RepairPolicy) -> chat.RepairResult:
    new = flatten_speculative(body)
    if new is None:
        return chat.RepairResult(body=body, changed=False)
    return chat.RepairResult(body=new, changed=True, repairs=["speculative_flattened"])


OPENAI: Literal["openai"] = "openai"
OTHER: Literal["other"] = "other"
ROUTES: tuple[ApiRoute, ...] = (
    ApiRoute(
        "/v1/chat/completions", "chat", chat.repair_request, "chat", token_probs=True, structured="chat", fields=OPENAI
    ),
    ApiRoute("/v1/completions", "completions", _flatten, "usage", token_probs=True, structured="native", fields=OPENAI),
    ApiRoute("/v1/embeddings", "embeddings", fields="embeddings"),
    ApiRoute("/v1/messages", "messages", anthropic.repair_request, "usage", ANTHROPIC_SSE, fields=OTHER),
    ApiRoute("/v1/messages/count_tokens", "count_tokens", anthropic.repair_request, fields=OTHER),
    ApiRoute(
        "/v1/responses", "responses", responses.repair_request, "usage", RESPONSES_SSE, structured="chat", fields=OTHER
    ),
    ApiRoute("/v1/responses/input_tokens", "input_tokens", responses.repair_request, fields=OTHER),
    ApiRoute("/v1/chat/completions/input_tokens", "chat_tokens", chat.repair_request, fields=OPENAI),
    ApiRoute("/apply-template", "template", chat.repair_request, fields=OPENAI),
    ApiRoute("/infill", "infill", _flatten, "usage", token_probs=True, structured="native", fields=OPENAI),
    ApiRoute("/v1/rerank", "rerank"),
    ApiRoute("/tokenize", "tokenize"),
    ApiRoute("/detokenize", "detokenize"),
)


@dataclass
class BodyPlan:
    """What :func:`prepare_body` decided for one request.

    Attributes:
        body: the body to send, or None to send the client's bytes untouched.
        thinking: whether the generation prompt opens a ``<think>`` block.
        repairs: repair kinds applied (for metrics).
        drafting_off: the reason drafting was turned off for this request, or None.
        trim_top: the answer's candidate lists must be emptied (``token_probs.widen`` asked for one).
    """

    body: dict[str, Any] | None
    thinking: bool = False
    repairs: list[str] = field(default_factory=list)
    drafting_off: str | None = None
    trim_top: bool = False


def check_n(body: dict[str, Any], model: ModelConfig) -> None:
    """``n`` choices are decoded in parallel, one slot each: more than the model's slots is a 400."""
    n = body.get("n", 1)
    if isinstance(n, int) and not isinstance(n, bool) and n > model.parallel:
        raise ApiError(
            400,
            f"n={n} is more than this model's {model.parallel} slot(s) (models.yaml 'parallel'); "
            f"ask for at most {model.parallel} choices or raise 'parallel'",
            param="n",
        )


def prepare_body(route: ApiRoute, body: dict[str, Any], model: ModelConfig, policy: chat.RepairPolicy) -> BodyPlan:
    """Check and repair one request body for ``route`` (the model's ``policy``).

    Raises:
        ApiError: 400 naming the field, from the route's repair, :func:`check_n` or
            ``orchestrator.serve.structured``.
    """
    plan = BodyPlan(None)
    if route.kind == "chat":
        check_n(body, model)
    if route.structured is not None:
        structured.check(body)
    if route.repair is not None:
        result = route.repair(body, policy)
        plan.thinking = result.thinking
        if result.changed:
            plan.body = result.body
            plan.repairs.extend(result.repairs)
        if "hosted_tool_skipped" in result.repairs:
            _log_skipped_once(model.name, body)
    if route.structured == "native":
        mapped = structured.to_native(plan.body if plan.body is not None else body)
        if mapped is not None:
            plan.body = mapped
            plan.repairs.append("response_format_mapped")
    _check_fields(route, plan, body)
    if route.token_probs and wants_token_probs(body):
        current = plan.body if plan.body is not None else body
        widened = widen(current)
        plan.trim_top = widened is not None
        plan.body = drafting_off(widened if widened is not None else current)
        plan.drafting_off = "token_probs"
    return plan


_SKIPPED_LOGGED: set[tuple[str, str]] = set()


def _log_skipped_once(model: str, body: dict[str, Any]) -> None:
    """Say once per model and tool type that hosted tools were left out (the metric counts each)."""
    for ttype in map_tools(body.get("tools")).skipped:
        if (model, ttype) not in _SKIPPED_LOGGED:
            _SKIPPED_LOGGED.add((model, ttype))
            log.warning("%s: Responses tool type %r is not run by this server; skipped (the model answers without it)",
                        model, ttype)  # fmt: skip


def _check_fields(route: ApiRoute, plan: BodyPlan, body: dict[str, Any]) -> None:
    """llama-server's fields of the body to send, checked (``orchestrator.serve.llama_fields``)."""
    current = plan.body if plan.body is not None else body
    if route.fields == "embeddings":
        llama_fields.check_embedding_input(current)
    elif route.fields is not None:
        fixed = llama_fields.check(current, openai_tools=route.fields == "openai")
        if fixed is not None:
            plan.body = fixed
            plan.repairs.append("null_dropped")


Shape = Literal["openai", "anthropic", "ollama"]


def shape_for(path: str) -> Shape:
    """The error shape of the API that ``path`` belongs to."""
    if path.startswith("/v1/messages"):
        return "anthropic"
    if path.startswith("/api/"):
        return "ollama"
    return "openai"


def error_body(path: str, err: ApiError) -> dict[str, Any]:
    """``err`` as the JSON body the client of ``path`` expects."""
    shape = shape_for(path)
    if shape == "anthropic":
        return anthropic.error_body(err)
    if shape == "ollama":
        return {"error": err.message}
    return err.body()


def served_routes() -> list[str]:
    """Every route the endpoint serves, for the 404 message and the README."""
    posts = [f"POST {r.path}" for r in ROUTES]
    gets = [
        "GET /v1/models",
        "GET /health",
        "GET /status",
        "GET /metrics",
        "POST /models/restart",
        "GET /ui/ (console)",
    ]
    ollama = [
        "GET /api/tags",
        "GET /api/ps",
        "GET /api/version",
        "POST /api/show",
        "POST /api/chat",
        "POST /api/generate",
        "POST /api/embed",
    ]
    return posts + gets + ollama
