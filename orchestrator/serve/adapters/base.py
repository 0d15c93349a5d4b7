"""The adapter interface: what one API adds to a request, and nothing that the APIs share.

A request goes (``orchestrator.serve.pipeline.ProxyRequest`` calls these in this order):

1. :meth:`Adapter.translate`: the client's body (its API's shape) -> :class:`Internal`, the body
   for one of llama-server's routes and the adapter of that route (itself when the API is
   llama-server's own, as for OpenAI chat or Anthropic Messages, which llama-server serves);
   :meth:`Adapter.recall` fills in what it refers to (a stored Responses turn);
2. :meth:`Adapter.local`: an answer that needs no upstream (Ollama's "load the model"), or None;
3. :meth:`Adapter.prepare` of the *internal* route: checks and repairs of that body
   (:class:`BodyPlan`);
4. a whole answer: :meth:`Adapter.whole` (parse, account through the request, fix, encode); a
   stream: :meth:`Adapter.codec` (``orchestrator.serve.streaming.StreamCodec``);
5. errors: :meth:`Adapter.error_body` before the answer starts, :meth:`Adapter.stream_error`
   inside a stream.

The per-request state an adapter may read or report to is :class:`Request`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.errors import ApiError
from orchestrator.serve.drafting.fields import flatten_speculative
from orchestrator.serve.http.body import dump_body
from orchestrator.serve.http.shapes import Shape
from orchestrator.serve.repair import chat, clock, llama_fields, structured, thinking_only
from orchestrator.serve.repair.token_probs import TrimStream, drafting_off, trim, wants_token_probs, widen
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


class ApiCall(Protocol):
    """One request's call of an API whose answer side needs what its request side learned
    (Responses: the limits that may cut the answer and the client's tools as mapped for
    llama-server, mapped once). Made by the route's :meth:`Adapter.prepare` (``BodyPlan.call``),
    carried by the request, read by that API's whole-answer fix and stream repair."""

    def fix(self, answer: dict[str, Any]) -> str | None:
        """Fix a whole answer or one streamed event in place; the repair kind, or None."""
        ...


class Request(Protocol):
    """What an adapter sees of the request in flight (``orchestrator.serve.pipeline.ProxyRequest``)."""

    model: ModelConfig
    route: Adapter  # the internal route's adapter (``Internal.route``)
    started: float  # time.monotonic() when the request arrived
    thinking: bool  # the generation prompt opens a <think> block
    trim_top: bool  # the answer's candidate lists must be emptied (token_probs.widen)
    attempt: int  # 1, or 2 for the resend of a reasoning-only answer
    call: ApiCall | None  # the route's prepare made it for the answer side (BodyPlan.call)
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
class BodyPlan:
    """What :meth:`Adapter.prepare` decided for one request.

    Attributes:
        body: the body to send, or None to send the body as it came.
        thinking: whether the generation prompt opens a ``<think>`` block.
        repairs: repair kinds applied (for metrics).
        drafting_off: the reason drafting was turned off for this request, or None.
        trim_top: the answer's candidate lists must be emptied (``token_probs.widen`` asked for one).
        call: the API's call for the answer side (:class:`ApiCall`), when its answer needs what the
            request side learned (Responses: its tool map and limits), so nothing is mapped twice.
    """

    body: dict[str, Any] | None = None
    thinking: bool = False
    repairs: list[str] = field(default_factory=list)
    drafting_off: str | None = None
    trim_top: bool = False
    call: ApiCall | None = None

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
