"""The adapter interface: what one API adds to a request, and nothing that the APIs share.

Each API's :class:`Adapter` opens a request (:meth:`Adapter.open`): the :class:`Call`, bound to
the llama-server route the request goes to. The pipeline (``orchestrator.serve.pipeline.ProxyRequest``)
talks to the call alone, in this order:

1. :meth:`Call.recall` fills in what the body refers to (a stored Responses turn);
2. :meth:`Call.local`: an answer that needs no upstream (Ollama's "load the model"), or None;
3. :meth:`Call.prepare`: the route's checks and repairs of the internal body (``BodyPlan``,
   ``orchestrator.serve.adapters.plan``);
4. a whole answer: :meth:`Call.whole` (parse, account through the request, fix, encode); a
   stream: :meth:`Call.codec` (``orchestrator.serve.streaming.StreamCodec``);
5. errors: the API's :meth:`Adapter.error_body` before the answer starts (before a call is
   opened too: the endpoint's API), :meth:`Adapter.stream_error` inside a stream;
   :meth:`Call.upstream_error` says what llama-server refused on the route.

A call has two sides: its ``api`` (the adapter whose client it answers: answer, stream and error
shapes) and its ``route`` (the adapter of llama-server's route: checks, repairs, session key,
prompt render, stream repair). They are one adapter when llama-server serves the API itself
(OpenAI chat, Anthropic Messages), two when the API translates (Ollama onto OpenAI chat).
The per-request state an adapter may read or report to is :class:`Request`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.errors import ApiError
from orchestrator.serve.adapters.plan import AnswerFix, BodyPlan
from orchestrator.serve.http.body import dump_body
from orchestrator.serve.http.shapes import Shape
from orchestrator.serve.repair import chat, thinking_only
from orchestrator.serve.repair.token_probs import TrimStream, trim
from orchestrator.serve.streaming import OPENAI_SSE, SSE_HEADERS, SseCodec, StreamCodec, StreamFlavor

#: Claude Code's session id, on every request of a session (its title and subagent requests too)
SESSION_HEADER = b"x-claude-code-session-id"
#: Codex's session id header (the same id as its ``prompt_cache_key``, so the same key)
CODEX_SESSION_HEADER = b"session_id"
SESSION_ID_CHARS = 128  # a longer id is cut: it names a session in /status, it is no payload


def session_id(prefix: str, value: str) -> str | None:
    """``prefix + value`` as a session key, cut to :data:`SESSION_ID_CHARS`; None for a value that
    is no text (a lone surrogate decoded from a JSON string inside the body)."""
    try:
        value.encode()
    except UnicodeEncodeError:
        return None
    return prefix + value[:SESSION_ID_CHARS]


if TYPE_CHECKING:
    from orchestrator.config.schema import ModelConfig


class Request(Protocol):
    """What an adapter sees of the request in flight (``orchestrator.serve.pipeline.ProxyRequest``)."""

    model: ModelConfig
    call: Call  # the request's call: its API, its llama-server route, what its prepare learned
    started: float  # time.monotonic() when the request arrived
    thinking: bool  # the generation prompt opens a <think> block
    trim_top: bool  # the answer's candidate lists must be emptied (token_probs.widen)
    attempt: int  # 1, or 2 for the resend of a reasoning-only answer
    continued: dict[str, Any] | None  # the answer that ended in its thinking, being continued

    @property
    def body(self) -> dict[str, Any]:
        """The internal body sent upstream (after repair)."""
        ...

    @property
    def responses_store(self) -> Any:
        """The endpoint's stored Responses (``serve.responses.stored.ResponseStore``), or None."""
        ...

    @property
    def client_body(self) -> dict[str, Any]:
        """The internal body before repair: the client's own, for APIs llama-server serves itself."""
        ...

    def count_repair(self, kind: str) -> None:
        """Count one repair of ``kind`` for this request's model."""

    def warn(self, header: str) -> None:
        """Send a ``Warning`` header (its value) with a whole answer."""

    def keep_alive(self, seconds: float) -> None:
        """The request's model stays loaded ``seconds`` after its last request (its TTL from now
        on: Ollama's ``keep_alive``); nothing for a model this endpoint does not load."""

    async def load(self) -> None:
        """The request's model loaded, waiting as a request would (Ollama's "load the model");
        nothing for a model this endpoint does not load."""

    def account(self, answer: dict[str, Any]) -> None:
        """Account a whole answer's ``timings`` (metrics, drafting watch, TTFT) or ``usage``."""


@dataclass
class Internal:
    """The internal request: llama-server's ``path``, the ``body`` for it, and that ``route``'s adapter.

    Attributes:
        raw: the client's bytes when ``body`` is exactly what they encode (forwarded untouched
            when nothing is repaired), else None.
        answer: the adapter that answers the client instead of the endpoint's own, for a request its
            API answers another way (Responses' ``compaction_trigger``: one ``compaction`` item).
    """

    path: str
    body: dict[str, Any]
    route: Adapter
    raw: bytes | None = None
    answer: Adapter | None = None  # who answers the client, when not the endpoint's own adapter

    @property
    def kind(self) -> str:
        """The internal route's kind (``chat`` requests get prefix affinity)."""
        return self.route.kind


@dataclass(frozen=True)
class Resend:
    """Ask again with ``body`` (``thinking`` for the new prompt): a reasoning-only answer retried."""

    body: dict[str, Any]
    thinking: bool


def parse_answer(data: bytes) -> dict[str, Any] | None:
    """A whole answer as a JSON object, or None when it is not one (passed on as it came)."""
    try:
        obj = json.loads(data)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


class Adapter:
    """One route of one API. The defaults are a pass-through route of llama-server's own in the
    OpenAI error shape: body and answer untouched, SSE streams relayed as they come.

    Attributes:
        path: the path clients call (and llama-server's path for it, unless :meth:`translate` says).
        kind: the ``endpoint`` label in metrics.
        flavor: the SSE stream shape (end marker, terminator, error event).
        stream_headers: the response head of a stream.
        shape: what a client's body may hold (``orchestrator.serve.http.shapes``); None checks
            numbers only.
        generates: the route generates tokens, so the draft-length policy chooses its K.
        error_prefix: the path prefix of this API's family, whose errors take this adapter's
            shape on every route under it (the proxy's own 404s too); None for OpenAI's, the default.
        api: the API family (``server.ollama_api: false`` leaves the ``ollama`` routes out).
        client_header: a request header only this API's clients send; errors on the proxy's own
            routes (``/v1/models``, 404s, 401s) take this adapter's shape for such a request.
    """

    path: str = ""
    kind: str = ""
    flavor: StreamFlavor = OPENAI_SSE
    stream_headers: list[tuple[bytes, bytes]] = SSE_HEADERS
    shape: Shape | None = None
    generates = False
    error_prefix: str | None = None
    renders_chat = False  # chat_request gives the chat request llama-server renders (prefix affinity)
    client_header: str | None = None
    api = "openai"

    def __init__(self, path: str = "", kind: str = "", shape: Shape | None = None) -> None:
        self.path = path or self.path
        self.kind = kind or self.kind
        self.shape = shape or self.shape

    def open(self, body: dict[str, Any], raw: bytes) -> Call:
        """The request's :class:`Call`: the client's ``body`` (``raw``: its bytes) translated for
        llama-server's route (:meth:`translate`), answered by this API (or by the one the
        translation names, ``Internal.answer``).

        Raises:
            ApiError: 400 for a body this API cannot translate.
        """
        return Call(self, self.translate(body, raw))

    def translate(self, body: dict[str, Any], raw: bytes) -> Internal:
        """The client's body -> the internal request (here: the same body for the same path)."""
        return Internal(self.path, body, self, raw)

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

    def prepare(self, body: dict[str, Any], model: ModelConfig, policy: chat.RepairPolicy) -> BodyPlan:
        """Check and repair the internal body for ``model`` (its repair ``policy``).

        Raises:
            ApiError: 400 naming the field.
        """
        return BodyPlan()

    def whole(self, req: Request, data: bytes) -> bytes | Resend:
        """The bytes for the client of a whole (non-streamed) upstream answer ``data``."""
        return data

    def stream_repair(self, req: Request) -> Any:
        """The internal route's ``StreamRepair``-like object for a stream, or None."""
        return None

    def codec(self, req: Request, route: Adapter) -> StreamCodec:
        """How the upstream stream of the internal ``route`` reaches this API's client."""
        return SseCodec(self.flavor, stream_repairs(req, route))

    def chat_request(self, body: dict[str, Any]) -> dict[str, Any]:
        """The chat request llama-server renders for this route's repaired ``body`` (only called
        when :meth:`chat_of` gives it; routes with ``renders_chat`` define it)."""
        raise NotImplementedError

    def chat_of(self) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
        """:meth:`chat_request` when this route renders a chat prompt (prefix affinity renders and
        tokenizes it in-process), else None."""
        return self.chat_request if self.renders_chat else None

    def session_key(self, body: dict[str, Any], headers: Sequence[tuple[bytes, bytes]] = ()) -> str | None:
        """The client's session key, which keeps a session on its slot: OpenAI's ``prompt_cache_key``
        in ``body`` (chat and Responses; Codex sends its session id), else Claude Code's
        ``X-Claude-Code-Session-Id`` header among the request's ``headers``, else Codex's
        ``session_id`` header (the same id as its ``prompt_cache_key``), else None."""
        key = body.get("prompt_cache_key")
        if isinstance(key, str) and key:
            return session_id("k:", key)
        codex = None
        for name, value in headers:
            if name == SESSION_HEADER and value:
                return session_id("s:", value.decode("utf-8", errors="replace"))
            if name == CODEX_SESSION_HEADER and value:
                codex = session_id("k:", value.decode("utf-8", errors="replace"))
        return codex

    def keepalive(self, req: Request, what: str) -> bytes:
        """One line a waiting stream sends to stay audible (``holding.audibly``): an SSE comment,
        which every SSE client ignores."""
        return b": " + what.encode() + b"\n\n"

    def upstream_error(self, err: ApiError) -> ApiError:
        """An error llama-server answered on this (internal) route, as the client should hear it."""
        return err

    def error_body(self, err: ApiError) -> dict[str, Any]:
        """``err`` as this API's JSON error body."""
        return err.body()

    def stream_error(self, err: ApiError) -> bytes:
        """``err`` as the last bytes of a stream whose head went out (an error event, the terminator)."""
        return self.flavor.error_event(err) + (self.flavor.done or b"")


class Generation(Adapter):
    """A route whose answers carry ``timings`` or ``usage``: parsed, accounted, fixed, encoded."""

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
        """The repaired answer and whether it changed (in place or as a new object), or a :class:`Resend`."""
        return obj, False

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
    def route(self) -> Adapter:
        """The adapter of llama-server's route: checks, repairs, session key, render, stream repair."""
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


def stream_repairs(req: Request, route: Adapter) -> Any:
    """The repairs of a stream of the internal ``route``: its own, candidates trimmed, and (a prompt
    that opened thinking) a normal end with nothing visible marked incomplete (``thinking_only``)."""
    repair = route.stream_repair(req)
    if req.trim_top:
        repair = TrimStream(repair)
    if req.thinking and route.kind in ("chat", "messages", "responses"):
        repair = thinking_only.ThinkingOnlyStream(repair, route.kind)
    return repair


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
