"""The API side of a request: each API's :class:`Adapter`, and the :class:`Call` it opens.

Each API's adapter opens a request (:meth:`Adapter.open`): the :class:`Call`, bound to the
llama-server :class:`~orchestrator.serve.adapters.route.Route` the request goes to. The pipeline
(``orchestrator.serve.pipeline.ProxyRequest``) talks to the call alone, in this order:

1. :meth:`Call.recall` fills in what the body refers to (a stored Responses turn);
2. :meth:`Call.local`: an answer that needs no upstream (Ollama's "load the model"), or None;
3. :meth:`Call.prepare`: the route's checks and repairs of the internal body (``BodyPlan``,
   ``orchestrator.serve.adapters.plan``);
4. a whole answer: :meth:`Call.whole` (parse, account through the request, the route's repairs,
   the API's shape); a stream: :meth:`Call.codec` (``orchestrator.serve.streaming.StreamCodec``,
   with the route's stream repair);
5. errors: the API's :meth:`Adapter.error_body` before the answer starts (before a call is
   opened too: the endpoint's API), :meth:`Adapter.stream_error` inside a stream;
   :meth:`Call.upstream_error` says what llama-server refused on the route.

The two sides are two kinds of object: an adapter is an API (what its client sends and hears), a
route is llama-server's (checks, repairs, session key, prompt render, answer repairs). An API that
llama-server serves itself (OpenAI chat, Anthropic Messages) has a route of its own; one that
translates (Ollama) goes to another API's route. The per-request state either may read or report
to is :class:`~orchestrator.serve.adapters.route.Request`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.errors import ApiError
from orchestrator.serve.adapters.plan import AnswerFix, BodyPlan
from orchestrator.serve.adapters.route import Request, Resend, Route
from orchestrator.serve.http.body import dump_body
from orchestrator.serve.http.shapes import Shape
from orchestrator.serve.repair import thinking_only
from orchestrator.serve.repair.token_probs import TrimStream, trim
from orchestrator.serve.streaming import OPENAI_SSE, SSE_HEADERS, SseCodec, StreamCodec, StreamFlavor

if TYPE_CHECKING:
    from orchestrator.config.schema import ModelConfig
    from orchestrator.serve.repair import chat


@dataclass
class Internal:
    """The internal request: llama-server's ``path``, the ``body`` for it, and that ``route``.

    Attributes:
        raw: the client's bytes when ``body`` is exactly what they encode (forwarded untouched
            when nothing is repaired), else None.
        answer: the adapter that answers the client instead of the endpoint's own, for a request its
            API answers another way (Responses' ``compaction_trigger``: one ``compaction`` item).
    """

    path: str
    body: dict[str, Any]
    route: Route
    raw: bytes | None = None
    answer: Adapter | None = None  # who answers the client, when not the endpoint's own adapter


def parse_answer(data: bytes) -> dict[str, Any] | None:
    """A whole answer as a JSON object, or None when it is not one (passed on as it came)."""
    try:
        obj = json.loads(data)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


class Adapter:
    """One route of one API, as its clients call it. The defaults: a pass-through to a route of
    llama-server's own of the same path (:class:`Route`), in the OpenAI error shape, SSE streams
    relayed as they come.

    Attributes:
        path: the path clients call.
        kind: the ``endpoint`` label in metrics.
        route: the llama-server route a request goes to, unless :meth:`translate` picks another.
        flavor: the SSE stream shape (end marker, terminator, error event).
        stream_headers: the response head of a stream.
        shape: what a client's body may hold (``orchestrator.serve.http.shapes``); None checks
            numbers only.
        error_prefix: the path prefix of this API's family, whose errors take this adapter's
            shape on every route under it (the proxy's own 404s too); None for OpenAI's, the default.
        api: the API family (``server.ollama_api: false`` leaves the ``ollama`` routes out).
        client_header: a request header only this API's clients send; errors on the proxy's own
            routes (``/v1/models``, 404s, 401s) take this adapter's shape for such a request.
    """

    path: str = ""
    kind: str = ""
    route: Route
    flavor: StreamFlavor = OPENAI_SSE
    stream_headers: list[tuple[bytes, bytes]] = SSE_HEADERS
    shape: Shape | None = None
    error_prefix: str | None = None
    client_header: str | None = None
    api = "openai"

    def __init__(self, path: str = "", kind: str = "", shape: Shape | None = None, route: Route | None = None) -> None:
        self.path = path or self.path
        self.kind = kind or self.kind
        self.shape = shape or self.shape
        if route is not None:
            self.route = route
        elif not hasattr(self, "route"):  # no class-level route: llama-server's own of the same path
            self.route = Route(self.path, self.kind)

    def open(self, body: dict[str, Any], raw: bytes) -> Call:
        """The request's :class:`Call`: the client's ``body`` (``raw``: its bytes) translated for
        llama-server's route (:meth:`translate`), answered by this API (or by the one the
        translation names, ``Internal.answer``).

        Raises:
            ApiError: 400 for a body this API cannot translate.
        """
        return Call(self, self.translate(body, raw))

    def translate(self, body: dict[str, Any], raw: bytes) -> Internal:
        """The client's body -> the internal request (here: the same body for this API's route)."""
        return Internal(self.route.path, body, self.route, raw)

    async def recall(self, req: Request, internal: Internal) -> Internal:
        """``internal`` with what it refers to filled in (Responses' ``previous_response_id``: the
        stored turns before it), before it is routed; here: as it is.

        Raises:
            ApiError: 404 for a reference to something that is not there.
        """
        return internal

    async def local(self, req: Request, client: dict[str, Any]) -> dict[str, Any] | None:
        """An answer given here without any upstream (``client``: the body as sent), or None."""
        return None

    def whole(self, req: Request, data: bytes) -> bytes | Resend:
        """The bytes for the client of a whole (non-streamed) upstream answer ``data``."""
        return data

    def codec(self, req: Request, route: Route) -> StreamCodec:
        """How the upstream stream of the internal ``route`` reaches this API's client."""
        return SseCodec(self.flavor, stream_repairs(req, route))

    def keepalive(self, req: Request, what: str) -> bytes:
        """One line a waiting stream sends to stay audible (``holding.audibly``): an SSE comment,
        which every SSE client ignores."""
        return b": " + what.encode() + b"\n\n"

    def error_body(self, err: ApiError) -> dict[str, Any]:
        """``err`` as this API's JSON error body."""
        return err.body()

    def stream_error(self, err: ApiError) -> bytes:
        """``err`` as the last bytes of a stream whose head went out (an error event, the terminator)."""
        return self.flavor.error_event(err) + (self.flavor.done or b"")


class Generation(Adapter):
    """An API whose answers carry ``timings`` or ``usage``: parsed, accounted, repaired by the
    route (:meth:`fix`), encoded in the API's shape (:meth:`encode`)."""

    def whole(self, req: Request, data: bytes) -> bytes | Resend:
        obj = parse_answer(data)
        if obj is None:
            return data  # not ours to fix; pass it on as llama-server sent it
        req.account(obj)
        trimmed = req.trim_top and trim(obj)
        fixed = self.fix(req, obj)
        if isinstance(fixed, Resend):
            return fixed
        return self.encode(req, fixed[0], data, changed=fixed[1] or trimmed)

    def fix(self, req: Request, obj: dict[str, Any]) -> tuple[dict[str, Any], bool] | Resend:
        """The repaired answer and whether it changed, or a :class:`Resend`: the route's repairs
        (``Route.fix``), unless the API answers its own way."""
        return req.call.route.fix(req, obj)

    def encode(self, req: Request, obj: dict[str, Any], data: bytes, *, changed: bool) -> bytes:
        """The client's bytes for the answer ``obj`` (``data`` as llama-server sent it, if unchanged)."""
        return dump_body(obj) if changed else data


class Call:
    """One request of one API, bound to llama-server's route (:meth:`Adapter.open`); the one
    object the pipeline talks to about the API (module docstring).

    Attributes:
        api: the adapter whose client this answers: the answer, stream and error shapes.
        internal: llama-server's ``path``, the ``body`` for it (before repair) and its ``route``.
        answer_fix: what the route's prepare learned for the answer side (``BodyPlan.answer_fix``).
    """

    __slots__ = ("answer_fix", "api", "internal")

    def __init__(self, api: Adapter, internal: Internal) -> None:
        self.api = internal.answer or api  # Responses' compaction trigger is answered its own way
        self.internal = internal
        self.answer_fix: AnswerFix | None = None

    @property
    def route(self) -> Route:
        """llama-server's route: checks, repairs, session key, render, answer repairs."""
        return self.internal.route

    @property
    def body(self) -> dict[str, Any]:
        """The internal body before repair: the client's own, for APIs llama-server serves itself."""
        return self.internal.body

    @property
    def generates(self) -> bool:
        """The route generates tokens (a prompt in one slot; the draft-length policy chooses its K)."""
        return self.internal.route.generates

    async def recall(self, req: Request) -> None:
        """What the body refers to filled in (``Adapter.recall``), before the request is routed."""
        self.internal = await self.api.recall(req, self.internal)

    async def local(self, req: Request, client: dict[str, Any]) -> dict[str, Any] | None:
        """An answer given without any upstream (``client``: the body as sent), or None."""
        return await self.api.local(req, client)

    def session_key(self, body: dict[str, Any], headers: Sequence[tuple[bytes, bytes]]) -> str | None:
        """The client's session key in ``body`` (the internal one) or the request's ``headers``."""
        return self.internal.route.session_key(body, headers)

    def chat_of(self) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
        """The chat request the route renders from a repaired body, when it renders one."""
        return self.internal.route.chat_of()

    def prepare(self, model: ModelConfig, policy: chat.RepairPolicy) -> BodyPlan:
        """The route's checks and repairs of the internal body for ``model`` (its ``policy``).

        Raises:
            ApiError: 400 naming the field.
        """
        plan = self.internal.route.prepare(self.internal.body, model, policy)
        self.answer_fix = plan.answer_fix
        return plan

    def whole(self, req: Request, data: bytes) -> bytes | Resend:
        """The client's bytes for llama-server's whole answer ``data``, or a :class:`Resend`."""
        return self.api.whole(req, data)

    def codec(self, req: Request) -> StreamCodec:
        """How llama-server's stream reaches the client."""
        return self.api.codec(req, self.internal.route)

    @property
    def stream_headers(self) -> list[tuple[bytes, bytes]]:
        """The response head of a stream."""
        return self.api.stream_headers

    def keepalive(self, req: Request, what: str) -> bytes:
        """One line a waiting stream sends to stay audible."""
        return self.api.keepalive(req, what)

    def upstream_error(self, err: ApiError) -> ApiError:
        """An error llama-server answered on the route, as the client should hear it."""
        return self.internal.route.upstream_error(err)


def stream_repairs(req: Request, route: Route) -> Any:
    """The repairs of a stream of the internal ``route``: its own, candidates trimmed, and (a prompt
    that opened thinking) a normal end with nothing visible marked incomplete (``thinking_only``)."""
    repair = route.stream_repair(req)
    if req.trim_top:
        repair = TrimStream(repair)
    if req.thinking and route.kind in ("chat", "messages", "responses"):
        repair = thinking_only.ThinkingOnlyStream(repair, route.kind)
    return repair
