"""HTTP to the llama-server instances (and peers): one pooled ``aiohttp.ClientSession`` per upstream.

The client is aiohttp, chosen by measurement (``scripts/bench_upstream_client.py``: against a
real llama-server, aiohttp's C parser costs about a third of httpx's CPU per request and per
streamed chunk, and its 1-token latency is lower). Three things live here and only here:

- **Keep-alive.** Each upstream (``base_url``) gets one session that keeps connections alive,
  created on first use and closed by :meth:`UpstreamPool.aclose`.
- **The retry.** A pooled connection can be dead by the time it is reused (llama-server was
  restarted, or closed the idle socket). A request written onto it gets no response at all.
  When sending fails that way, *before any response head arrived* and within ``STALE_WITHIN_S``,
  the request was never processed, so it is sent once more on a fresh connection (a second session that never keeps
  connections, so the retry cannot land on another stale socket). A failure after the head
  arrived is never retried.
- **Error mapping.** aiohttp's exceptions become the ``TransportFailure`` kinds of
  ``orchestrator.serve.upstream.errors`` (``Refused``, ``NoResponse``, ``Broken``) by exception
  type, never by message text; ``upstream_errors.to_api_error`` makes them a client's error.

Timeouts (seconds, from ``server.timeouts`` in models.yaml): ``connect`` bounds the TCP connect;
``first_byte`` bounds the wait for the response head (for a non-streamed request that is the
whole generation, for a stream it is prefill plus the first token, because llama-server sends
its headers with the first event); ``idle`` bounds each wait for a body chunk. The last two are
enforced around the awaits (``asyncio.timeout`` for the head, :class:`_IdleWatch` for the body),
not with the client's read timeout, because they differ between head and body.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any

import aiohttp
from yarl import URL

from orchestrator.serve.upstream.errors import Broken, NoResponse, Refused, TransportFailure, UpstreamTimeout

#: Called with ``(base_url, path, body bytes)`` before each request is sent (a test seam: the
#: tests record the exact bodies sent to llama-server).
RequestHook = Callable[[str, str, bytes], Awaitable[None]]


# aiohttp's failures of a request on a connection that died before the head (closed, reset).
_DEAD_CONNECTION = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, aiohttp.ClientConnectionResetError)
# A stale pooled socket fails as soon as a request is written on it. A connection that fails later
# was taken by a live server, which may have worked on the request: that is the caller's to decide
# (``pipeline.RESEND_WITHIN_S``), never a silent resend here.
STALE_WITHIN_S = 0.5


def _failure(exc: aiohttp.ClientError, *, started: bool) -> TransportFailure:
    """aiohttp's ``exc`` as a :class:`TransportFailure` (``started``: the response head had arrived)."""
    detail = f"{type(exc).__name__}: {exc}".strip(": ")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return Refused(detail)
    if isinstance(exc, (*_DEAD_CONNECTION, aiohttp.ClientPayloadError)):
        return Broken(detail) if started else NoResponse(detail)
    return TransportFailure(detail)


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
    """The HTTP sessions for one llama-server instance (or peer).

    Args:
        base_url: ``"http://127.0.0.1:PORT"`` (a peer may have a path and TLS).
        connect: connect timeout (s).
        first_byte: longest wait for the response head (s).
        idle: longest silence between body chunks (s).
        hooks: called before each request is sent (:data:`RequestHook`).
        headers: sent with every request (a peer's ``Authorization``).
        child_key: the key of the child behind ``base_url``, read at each request (its instance's
            ``ChildLock.current``: a restart's new key applies at once); None for a peer.

    Must be made inside the running event loop (aiohttp's sessions belong to it).
    """

    def __init__(
        self,
        base_url: str,
        *,
        connect: float,
        first_byte: float,
        idle: float,
        hooks: list[RequestHook] | None = None,
        headers: Mapping[str, str] | None = None,
        child_key: Callable[[], str | None] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._child_key = child_key
        self.set_timeouts(connect, first_byte, idle)
        self.hooks = hooks if hooks is not None else []
        self._urls: dict[str, URL] = {}
        # Reads are bounded by asyncio timeouts (module docstring); the client's own are off.
        options: dict[str, Any] = {
            "headers": dict(headers or {}),
            "auto_decompress": False,  # bytes pass as llama-server sent them
            "skip_auto_headers": ("Accept-Encoding", "User-Agent"),
            "trust_env": False,
        }
        self.client = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30.0), **options)
        self._fresh = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True), **options)
        #: Times a request was re-sent after a connection died before any response (for tests/metrics).
        self.retries = 0

    def set_timeouts(self, connect: float, first_byte: float, idle: float) -> None:
        """Use these timeouts (s) from the next request on; requests under way keep theirs."""
        self.connect, self.first_byte, self.idle = connect, first_byte, idle
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect)

    def _url(self, path: str) -> URL:
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = URL(self.base_url + path)
        return url

    async def open(
        self,
        method: str,
        path: str,
        content: bytes,
        headers: Mapping[str, str],
        *,
        on_retry: Callable[[], None] | None = None,
    ) -> aiohttp.ClientResponse:
        """Send a request and return once the response head arrived; the body is not read yet.

        The caller must ``response.release()`` (or read it to the end).

        Args:
            method: ``"POST"`` or ``"GET"``.
            path: e.g. ``"/v1/chat/completions"``.
            content: the request body (bytes, sent as is).
            headers: request headers to send (content-type, ...).
            on_retry: called when the request is resent after a dead pooled connection.

        Raises:
            UpstreamTimeout: no connection within ``connect`` or no head within ``first_byte`` seconds.
            TransportFailure: the connection failed (also after the one retry).
        """
        url = self._url(path)
        sent = asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(self.first_byte):
                try:
                    return await self._send(self.client, method, path, url, content, headers)
                except _DEAD_CONNECTION as exc:
                    if isinstance(exc, aiohttp.ClientConnectorError):
                        raise
                    if asyncio.get_running_loop().time() - sent > STALE_WITHIN_S:
                        raise  # not a stale socket: the server took it and went away (see STALE_WITHIN_S)
                    # Stale keep-alive socket (module docstring): nothing was processed; resend once
                    # on a connection that is certainly new.
                    self.retries += 1
                    if on_retry is not None:
                        on_retry()
                    return await self._send(self._fresh, method, path, url, content, headers)
        except aiohttp.ServerTimeoutError:
            raise UpstreamTimeout("connect", self.connect) from None
        except TimeoutError:
            raise UpstreamTimeout("first_byte", self.first_byte) from None
        except aiohttp.ClientError as exc:
            raise _failure(exc, started=False) from exc

    async def _send(
        self,
        session: aiohttp.ClientSession,
        method: str,
        path: str,
        url: URL,
        content: bytes,
        headers: Mapping[str, str],
    ) -> aiohttp.ClientResponse:
        for hook in self.hooks:
            await hook(self.base_url, path, content)
        key = self._child_key() if self._child_key is not None else None  # supervise/child_auth.py
        if key is not None:
            headers = {**headers, "Authorization": f"Bearer {key}"}
        return await session.request(
            method, url, data=content, headers=headers, allow_redirects=False, timeout=self._timeout
        )

    async def read_body(self, response: aiohttp.ClientResponse) -> bytes:
        """Read the whole body of ``response`` (bytes), bounded by the idle timeout per chunk.

        Raises:
            UpstreamTimeout: ``idle`` seconds without data.
            TransportFailure: the connection broke.
        """
        parts = [chunk async for chunk in self.iter_body(response)]
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def iter_body(self, response: aiohttp.ClientResponse) -> AsyncGenerator[bytes, None]:
        """Yield the raw body chunks of ``response`` as they arrive (no decoding, no copies).

        Raises:
            UpstreamTimeout: ``idle`` seconds without a chunk while waiting for one (time the
                caller spends between chunks does not count).
            TransportFailure: the connection broke (e.g. llama-server died mid-stream).
        """
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        watch = _IdleWatch(loop, task, self.idle)
        readany = response.content.readany
        try:
            while True:
                watch.waiting_since = loop.time()
                try:
                    chunk = await readany()
                except asyncio.CancelledError:
                    if watch.fired and task.uncancel() == 0:
                        raise UpstreamTimeout("idle", self.idle) from None
                    raise
                except aiohttp.ClientError as exc:
                    raise _failure(exc, started=True) from exc
                if not chunk:
                    return
                watch.waiting_since = None
                yield chunk
        finally:
            watch.stop()

    async def get_json(self, path: str, timeout: float) -> tuple[int, Any]:
        """``GET path``: its status and JSON body, within ``timeout`` seconds (a peer's health check).

        Raises:
            TransportFailure: the connection failed; TimeoutError: ``timeout`` passed;
            ValueError: the body is not JSON.
        """
        try:
            key = self._child_key() if self._child_key is not None else None
            headers = {"Authorization": f"Bearer {key}"} if key is not None else None
            async with (
                asyncio.timeout(timeout),
                self.client.get(self._url(path), headers=headers, timeout=self._timeout) as response,
            ):
                return response.status, json.loads(await response.read())
        except aiohttp.ClientError as exc:
            raise _failure(exc, started=False) from exc

    async def aclose(self) -> None:
        """Close both sessions and their connections."""
        await self.client.close()
        await self._fresh.close()


class UpstreamPool:
    """One :class:`Upstream` per instance, created lazily.

    Args:
        timeouts: returns an object with ``connect``, ``first_byte`` and ``idle`` (seconds), i.e.
            the running config's ``server.timeouts``: read on every ``get``, so a reload's timeouts
            apply to the next request.

    An instance launched with ``--port 0`` gets a new port on every restart; its previous
    upstream (whose server is gone) is closed in the background when the new one is created.
    """

    def __init__(self, timeouts: Callable[[], Any]) -> None:
        self._timeouts = timeouts
        self._by_key: dict[str, Upstream] = {}
        self._made_with: dict[str, tuple[float, float, float]] = {}  # the timeouts of each upstream
        self._closing: set[asyncio.Task[None]] = set()
        #: Request hooks given to every upstream created from now on (a test seam: the tests
        #: record the exact bodies sent to llama-server).
        self.hooks: list[RequestHook] = []

    def get(self, base_url: str, key: str | None = None, child_key: Callable[[], str | None] | None = None) -> Upstream:
        """Return the upstream for ``base_url`` (``"http://127.0.0.1:PORT"``).

        Args:
            base_url: where the instance listens now.
            key: the instance name; when given, an upstream kept for that instance at another
                ``base_url`` is replaced (and closed).
            child_key: the instance's ``ChildLock.current`` (see :class:`Upstream`).
        """
        key = key or base_url
        upstream = self._by_key.get(key)
        t = self._timeouts()
        wanted = (t.connect, t.first_byte, t.idle)
        if upstream is not None and upstream.base_url == base_url.rstrip("/"):
            if self._made_with.get(key, wanted) != wanted:  # a reload changed them: next request on
                upstream.set_timeouts(*wanted)
                self._made_with[key] = wanted
            return upstream
        if upstream is not None:
            task = asyncio.get_running_loop().create_task(upstream.aclose())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        upstream = Upstream(
            base_url, connect=t.connect, first_byte=t.first_byte, idle=t.idle, hooks=self.hooks, child_key=child_key
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
