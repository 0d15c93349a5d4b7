"""HTTP to the llama-server instances: one pooled ``httpx.AsyncClient`` per instance.

Three things live here and only here:

- **Keep-alive.** Each upstream (``base_url``) gets one ``httpx.AsyncClient`` that keeps
  connections alive, created on first use and closed by :meth:`UpstreamPool.aclose`.
- **The retry.** A pooled connection can be dead by the time it is reused (llama-server was
  restarted, or closed the idle socket). A request written onto it gets no response at all.
  When ``send`` fails that way, *before any response head arrived*, the request was never
  processed, so it is sent once more on a fresh connection (a second client that never keeps
  connections, so the retry cannot land on another stale socket). A failure after the head
  arrived is never retried.
- **Error mapping.** Transport failures become :class:`~orchestrator.errors.ApiError` in
  :func:`to_api_error`, by exception type (after httpx's own ``map_httpcore_exceptions``),
  never by matching message text.

Timeouts (seconds, from ``server.timeouts`` in models.yaml): ``connect`` is httpx's connect
timeout; ``first_byte`` bounds the wait for the response head (for a non-streamed request that
is the whole generation, for a stream it is prefill plus the first token, because llama-server
sends its headers with the first event); ``idle`` bounds each wait for a body chunk. The last
two are enforced around the awaits (``asyncio.timeout`` for the head, :class:`_IdleWatch` for
the body), not with httpx's read timeout, because they differ between head and body.

The clients run on httpx's own transport over a small asyncio network backend
(:mod:`orchestrator.serve.transport`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any, cast

import httpx

from orchestrator.errors import ApiError
from orchestrator.serve import agent_errors, llama_fields
from orchestrator.serve.transport import asyncio_transport
from orchestrator.supervise.child_auth import CHILD_AUTH

# Failures of ``send`` that mean "the connection died before a response head": the peer closed
# (RemoteProtocolError: h11 saw EOF while waiting for the status line), reset (ReadError), or the
# write hit a closed socket (WriteError). ConnectError is not here: a fresh connection that cannot
# connect will not connect on a retry either.
NO_RESPONSE_ERRORS: tuple[type[Exception], ...] = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
# ... and with a refused connection: the request was answered by nothing (the instance just died).
NOTHING_ANSWERED: tuple[type[Exception], ...] = (httpx.ConnectError, *NO_RESPONSE_ERRORS)

# Seconds a client is told to wait when the instance cannot be reached (it is likely restarting).
UNREACHABLE_RETRY_AFTER = 5.0


class NothingAnswered(Exception):
    """The replica answered nothing (refused the connection, closed it before any response head);
    ``args``: the transport error, and the replica's stall count when the request was sent."""


class UpstreamTimeout(Exception):
    """The upstream was silent for longer than a configured timeout.

    Args:
        phase: ``"first_byte"`` (no response head in time) or ``"idle"`` (silence inside the body).
        seconds: the limit that was exceeded.
    """

    def __init__(self, phase: str, seconds: float) -> None:
        super().__init__(f"no {'response' if phase == 'first_byte' else 'data'} from llama-server for {seconds:g} s")
        self.phase = phase
        self.seconds = seconds


def to_api_error(exc: BaseException) -> ApiError:
    """Map a transport failure talking to llama-server to the error a client gets.

    Args:
        exc: an :class:`UpstreamTimeout` or an ``httpx.TransportError``.

    Returns:
        ``ApiError`` 504 ``upstream_timeout`` for timeouts; 503 ``upstream_unavailable`` with
        ``Retry-After`` when the instance refused the connection (it died or is restarting);
        502 ``upstream_disconnected`` for a connection lost or broken mid-exchange; 502
        ``upstream_error`` for any other transport error.

    Raises:
        TypeError: for an exception that is not a transport failure (a programming error: let
            it reach the 500 handler instead of hiding it).
    """
    if isinstance(exc, UpstreamTimeout):
        return ApiError(504, str(exc), code="upstream_timeout")
    if isinstance(exc, httpx.TimeoutException):
        return ApiError(504, f"llama-server timed out ({type(exc).__name__})", code="upstream_timeout")
    if isinstance(exc, httpx.ConnectError):
        return ApiError(
            503,
            "llama-server is not reachable (it may be restarting)",
            code="upstream_unavailable",
            retry_after=UNREACHABLE_RETRY_AFTER,
        )
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        return ApiError(
            502, "llama-server closed the connection before the response was complete", code="upstream_disconnected"
        )
    if isinstance(exc, httpx.TransportError):
        return ApiError(502, f"error talking to llama-server ({type(exc).__name__})", code="upstream_error")
    raise TypeError(f"not a transport failure: {exc!r}") from exc


def stalled_error(new_stalls: int, warnings: list[str]) -> ApiError | None:
    """The error for a request cut off because its replica stalled and was killed, else None.

    Args:
        new_stalls: stalls of the replica since the request was sent (``Instance.stalls``).
        warnings: the replica's warnings (the stall's reason is one of them).
    """
    if new_stalls <= 0:
        return None
    stall = next((w for w in warnings if w.startswith("stalled")), "stalled")
    message = f"llama-server stopped making progress on this request and was restarted ({stall})"
    return ApiError(502, message, code="upstream_stalled")


def from_upstream_status(status: int, body: bytes) -> ApiError:
    """Turn a llama-server error response into the error the client gets.

    Args:
        status: llama-server's HTTP status (>= 400).
        body: its body; llama-server sends ``{"error": {"code", "message", "type"}}``.

    Returns:
        For a 500 that is a client's mistake (``llama_fields.client_mistake``: a template
        exception, malformed tools...), a 400 naming the field. For other 5xx, ``ApiError`` 502
        ``upstream_error`` carrying llama-server's message. For 4xx, the same status, message and (string)
        ``type``/``code`` in the OpenAI shape.
    """
    message, type_, code = None, None, None
    try:
        err = json.loads(body).get("error")
    except (ValueError, AttributeError):
        err = None
    if isinstance(err, dict):
        message = err.get("message") if isinstance(err.get("message"), str) else None
        type_ = err.get("type") if isinstance(err.get("type"), str) else None
        code = err.get("code") if isinstance(err.get("code"), str) else None
    elif isinstance(err, str):
        message = err
    if message is None:
        message = body[:500].decode("utf-8", errors="replace").strip() or f"HTTP {status}"
    if status == 501:
        # llama-server's "not supported" (e.g. /v1/embeddings without --embeddings): a fact about
        # the model's launch, not an upstream failure
        return ApiError(501, f"llama-server: {message}", code="not_implemented", type_="invalid_request_error")
    if status == 500 and (mistake := llama_fields.client_mistake(message)) is not None:
        return mistake  # the exception came from parsing the client's body, not from a fault
    if status >= 500:
        return ApiError(502, f"llama-server answered {status}: {message}", code="upstream_error")
    return agent_errors.overflow(message, type_) or ApiError(status, message, type_=type_, code=code)


class _IdleWatch:
    """Cancels ``task`` once it has waited ``idle`` seconds for one chunk.

    One timer per idle period instead of one per chunk: per chunk the reader only stores the
    time it started waiting (``waiting_since``, None while the caller handles the chunk); the
    timer checks and re-arms itself.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any], idle: float) -> None:
        self._loop = loop
        self._task = task
        self._idle = idle
        self.waiting_since: float | None = None
        self.fired = False
        self._handle = loop.call_at(loop.time() + idle, self._check)

    def _check(self) -> None:
        now = self._loop.time()
        since = self.waiting_since
        if since is not None and now - since >= self._idle:
            self.fired = True
            self._task.cancel()
            return
        self._handle = self._loop.call_at((since if since is not None else now) + self._idle, self._check)

    def stop(self) -> None:
        self._handle.cancel()


class Upstream:
    """The HTTP clients for one llama-server instance.

    Args:
        base_url: ``"http://127.0.0.1:PORT"``.
        connect: connect timeout (s).
        first_byte: longest wait for the response head (s).
        idle: longest silence between body chunks (s).
        event_hooks: httpx event hooks for both clients (tests record outgoing requests).
        headers: sent with every request (a peer's ``Authorization``).
    """

    def __init__(
        self,
        base_url: str,
        *,
        connect: float,
        first_byte: float,
        idle: float,
        event_hooks: Mapping[str, list[Callable[..., Any]]] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.base_url = base_url
        self.first_byte = first_byte
        self.idle = idle
        # Reads are bounded by asyncio timeouts (module docstring); httpx's own read timeout is off.
        timeout = httpx.Timeout(connect=connect, read=None, write=connect, pool=None)
        pooled = httpx.Limits(max_connections=None, max_keepalive_connections=64, keepalive_expiry=30.0)
        # the lean transport speaks plain HTTP only; a peer behind TLS gets httpx's own
        plain = base_url.startswith("http://")
        self.client = httpx.AsyncClient(
            base_url=base_url,
            timeout=timeout,
            transport=asyncio_transport(pooled) if plain else httpx.AsyncHTTPTransport(limits=pooled),
            trust_env=False,
            event_hooks=dict(event_hooks or {}),
            headers=dict(headers or {}),
            auth=CHILD_AUTH,  # a locked child's key (supervise/child_auth.py); nothing for peers
        )
        fresh = httpx.Limits(max_connections=None, max_keepalive_connections=0)
        self._fresh = httpx.AsyncClient(
            base_url=base_url,
            timeout=timeout,
            transport=asyncio_transport(fresh) if plain else httpx.AsyncHTTPTransport(limits=fresh),
            trust_env=False,
            event_hooks=dict(event_hooks or {}),
            headers=dict(headers or {}),
            auth=CHILD_AUTH,  # a locked child's key (supervise/child_auth.py); nothing for peers
        )
        #: Times a request was re-sent after a connection died before any response (for tests/metrics).
        self.retries = 0

    async def open(
        self,
        method: str,
        path: str,
        content: bytes,
        headers: Mapping[str, str],
        *,
        on_retry: Callable[[], None] | None = None,
    ) -> httpx.Response:
        """Send a request and return once the response head arrived; the body is not read yet.

        The caller must ``await response.aclose()`` (or read it to the end).

        Args:
            method: ``"POST"`` or ``"GET"``.
            path: e.g. ``"/v1/chat/completions"``.
            content: the request body (bytes, sent as is; httpx sets Content-Length).
            headers: request headers to send (content-type, ...).
            on_retry: called when the request is resent after a dead pooled connection.

        Raises:
            UpstreamTimeout: no head within ``first_byte`` seconds.
            httpx.TransportError: the connection failed (also after the one retry).
        """
        request = self.client.build_request(method, path, content=content, headers=headers)
        try:
            async with asyncio.timeout(self.first_byte):
                try:
                    return await self.client.send(request, stream=True)
                except NO_RESPONSE_ERRORS:
                    # Stale keep-alive socket (module docstring): nothing was processed; resend once
                    # on a connection that is certainly new.
                    self.retries += 1
                    if on_retry is not None:
                        on_retry()
                    retry = self._fresh.build_request(method, path, content=content, headers=headers)
                    return await self._fresh.send(retry, stream=True)
        except TimeoutError:
            raise UpstreamTimeout("first_byte", self.first_byte) from None

    async def read_body(self, response: httpx.Response) -> bytes:
        """Read the whole body of ``response`` (bytes), bounded by the idle timeout per chunk.

        Raises:
            UpstreamTimeout: ``idle`` seconds without data.
            httpx.TransportError: the connection broke.
        """
        parts = []
        async for chunk in self.iter_body(response):
            parts.append(chunk)
        return b"".join(parts)

    async def iter_body(self, response: httpx.Response) -> AsyncGenerator[bytes, None]:
        """Yield the raw body chunks of ``response`` as they arrive (no decoding, no copies).

        Raises:
            UpstreamTimeout: ``idle`` seconds without a chunk while waiting for one (time the
                caller spends between chunks does not count).
            httpx.TransportError: the connection broke (e.g. llama-server died mid-stream).
        """
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        watch = _IdleWatch(loop, task, self.idle)
        # httpx implements aiter_raw as an async generator; its type says only AsyncIterator
        chunks = cast(AsyncGenerator[bytes, None], response.aiter_raw())
        try:
            while True:
                watch.waiting_since = loop.time()
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    return
                except asyncio.CancelledError:
                    if watch.fired and task.uncancel() == 0:
                        raise UpstreamTimeout("idle", self.idle) from None
                    raise
                watch.waiting_since = None
                yield chunk
        finally:
            watch.stop()
            await chunks.aclose()

    def set_timeouts(self, connect: float, first_byte: float, idle: float) -> None:
        """Use these timeouts (s) from the next request on; requests under way keep theirs."""
        self.first_byte, self.idle = first_byte, idle
        timeout = httpx.Timeout(connect=connect, read=None, write=connect, pool=None)
        self.client.timeout = self._fresh.timeout = timeout

    async def aclose(self) -> None:
        """Close both clients and their connections."""
        await self.client.aclose()
        await self._fresh.aclose()


class UpstreamPool:
    """One :class:`Upstream` per instance, created lazily.

    Args:
        timeouts: returns an object with ``connect``, ``first_byte`` and ``idle`` (seconds), i.e.
            the running config's ``server.timeouts``: read on every ``get``, so a reload's timeouts
            apply to the next request (an upstream made with other timeouts is replaced).

    An instance launched with ``--port 0`` gets a new port on every restart; its previous
    upstream (whose server is gone) is closed in the background when the new one is created.
    """

    def __init__(self, timeouts: Callable[[], Any]) -> None:
        self._timeouts = timeouts
        self._by_key: dict[str, Upstream] = {}
        self._made_with: dict[str, tuple[float, float, float]] = {}  # the timeouts of each upstream
        self._closing: set[asyncio.Task[None]] = set()
        #: httpx event hooks given to every client created from now on (a test seam: the tests
        #: record the exact bodies sent to llama-server with a "request" hook).
        self.event_hooks: dict[str, list[Callable[..., Any]]] = {"request": [], "response": []}

    def get(self, base_url: str, key: str | None = None) -> Upstream:
        """Return the upstream for ``base_url`` (``"http://127.0.0.1:PORT"``).

        Args:
            base_url: where the instance listens now.
            key: the instance name; when given, an upstream kept for that instance at another
                ``base_url`` is replaced (and closed).
        """
        key = key or base_url
        upstream = self._by_key.get(key)
        t = self._timeouts()
        wanted = (t.connect, t.first_byte, t.idle)
        if upstream is not None and upstream.base_url == base_url:
            if self._made_with.get(key, wanted) != wanted:  # a reload changed them: next request on
                upstream.set_timeouts(*wanted)
                self._made_with[key] = wanted
            return upstream
        if upstream is not None:
            task = asyncio.get_running_loop().create_task(upstream.aclose())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        upstream = Upstream(
            base_url, connect=t.connect, first_byte=t.first_byte, idle=t.idle, event_hooks=self.event_hooks
        )
        self._by_key[key] = upstream
        self._made_with[key] = wanted
        return upstream

    def add(self, key: str, upstream: Upstream) -> None:
        """Use ``upstream`` (made by its owner, e.g. a peer with its own timeouts and key) for ``key``."""
        self._by_key[key] = upstream
        self._made_with.pop(key, None)

    def all(self) -> list[Upstream]:
        """Every upstream in use."""
        return list(self._by_key.values())

    async def aclose(self) -> None:
        """Close every client (app shutdown)."""
        upstreams, self._by_key = list(self._by_key.values()), {}
        for upstream in upstreams:
            await upstream.aclose()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
