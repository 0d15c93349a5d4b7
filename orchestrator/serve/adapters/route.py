"""llama-server's side of a request: the :class:`Route` it goes to, and what a route may read of
the request in flight (:class:`Request`).

A route is one of llama-server's own paths as requests reach it, whatever API they came in:
Ollama's ``/api/chat`` and OpenAI's ``/v1/chat/completions`` both end on the chat route, so both
get its checks and repairs, its session key, its prompt render (prefix affinity) and its repairs
of llama-server's answer, whole (:meth:`Route.fix`) and streamed (:meth:`Route.stream_repair`).
What the client hears (the answer's shape, the stream's, the errors') is its API's adapter's
(``orchestrator.serve.adapters.base.Adapter``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.errors import ApiError
from orchestrator.serve.adapters.plan import AnswerFix, BodyPlan

if TYPE_CHECKING:
    from orchestrator.config.schema import ModelConfig
    from orchestrator.serve.repair import chat

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


class CallView(Protocol):
    """What a route or an adapter reads of the request's call (``orchestrator.serve.adapters.base.Call``)."""

    answer_fix: AnswerFix | None  # what the route's prepare learned for the answer side

    @property
    def route(self) -> Route:
        """llama-server's route of the request."""
        ...


class Request(Protocol):
    """What an adapter or a route sees of the request in flight (``orchestrator.serve.pipeline.ProxyRequest``)."""

    model: ModelConfig
    started: float  # time.monotonic() when the request arrived
    thinking: bool  # the generation prompt opens a <think> block
    trim_top: bool  # the answer's candidate lists must be emptied (token_probs.widen)
    attempt: int  # 1, or 2 for the resend of a reasoning-only answer
    continued: dict[str, Any] | None  # the answer that ended in its thinking, being continued

    @property
    def call(self) -> CallView:
        """The request's call: its API, its llama-server route, what its prepare learned."""
        ...

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


@dataclass(frozen=True)
class Resend:
    """Ask again with ``body`` (``thinking`` for the new prompt): a reasoning-only answer retried."""

    body: dict[str, Any]
    thinking: bool


class Route:
    """One of llama-server's routes. The defaults pass body and answer untouched.

    Attributes:
        path: llama-server's path.
        kind: what the route does (``chat`` routes get prefix affinity; the draft-length policy
            and the thinking-only stream repair read it).
        generates: the route generates tokens, so the draft-length policy chooses its K.
        renders_chat: :meth:`chat_request` gives the chat request llama-server renders (prefix affinity).
    """

    path: str = ""
    kind: str = ""
    generates = False
    renders_chat = False

    def __init__(self, path: str = "", kind: str = "") -> None:
        self.path = path or self.path
        self.kind = kind or self.kind

    def prepare(self, body: dict[str, Any], model: ModelConfig, policy: chat.RepairPolicy) -> BodyPlan:
        """Check and repair the internal body for ``model`` (its repair ``policy``).

        Raises:
            ApiError: 400 naming the field.
        """
        return BodyPlan()

    def fix(self, req: Request, obj: dict[str, Any]) -> tuple[dict[str, Any], bool] | Resend:
        """llama-server's whole answer ``obj`` repaired, and whether it changed (in place or as a
        new object), or a :class:`Resend`."""
        return obj, False

    def stream_repair(self, req: Request) -> Any:
        """The route's ``StreamRepair``-like object for a stream, or None."""
        return None

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

    def upstream_error(self, err: ApiError) -> ApiError:
        """An error llama-server answered on this route, as the client should hear it."""
        return err


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
