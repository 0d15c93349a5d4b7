"""httpx's transport over a small asyncio network backend, for the proxy's upstream clients.

The backend (:class:`_AsyncioBackend`) sends each request as one ``send()`` (llama-server's HTTP
thread wakes once, not twice) and skips anyio's per-read/per-write bookkeeping; together about
15% less proxy CPU per non-streamed request than httpx's default backend (``scripts/bench_proxy.py``
measures the proxy's overhead).
"""

from __future__ import annotations

import asyncio
import select
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx


class _CoalescingStream(httpcore.AsyncNetworkStream):
    """A TCP connection on plain asyncio streams whose writes wait for the next read.

    httpcore writes a request as separate pieces (head, body, end). Sending them as one
    ``send()`` when the client turns to read the response saves a syscall per request and,
    more to the point, wakes llama-server's HTTP thread once instead of twice. Plain asyncio
    streams also skip anyio's per-call cancel-scope bookkeeping. Only for plain-HTTP upstreams.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._pending: list[bytes] = []

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            if self._pending:
                data = b"".join(self._pending) if len(self._pending) > 1 else self._pending[0]
                self._pending.clear()
                self._writer.write(data)
                await self._writer.drain()  # returns at once unless the socket buffer is full
            if timeout is None:
                return await self._reader.read(max_bytes)
            async with asyncio.timeout(timeout):
                return await self._reader.read(max_bytes)
        except TimeoutError:
            raise httpcore.ReadTimeout(f"no data for {timeout} s") from None
        except OSError as err:
            raise httpcore.ReadError(str(err) or type(err).__name__) from err

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:
            self._pending.append(buffer)

    async def aclose(self) -> None:
        self._pending.clear()
        self._writer.close()

    async def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("TLS is not used between the proxy and llama-server")

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            # httpcore asks this of idle kept-alive connections: readable means the server
            # closed it (or sent junk), so the connection is dropped instead of reused.
            if self._reader.at_eof() or self._writer.is_closing():
                return True
            sock = self._writer.get_extra_info("socket")
            return bool(sock is not None and select.select([sock], [], [], 0)[0])
        names = {"client_addr": "sockname", "server_addr": "peername", "socket": "socket"}
        return self._writer.get_extra_info(names.get(info, info))


class _AsyncioBackend(httpcore.AsyncNetworkBackend):
    """httpcore network backend on asyncio streams (see :class:`_CoalescingStream`)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, local_addr=(local_address, 0) if local_address else None
                )
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"connect to {host}:{port} took over {timeout} s") from None
        except OSError as err:
            raise httpcore.ConnectError(str(err) or type(err).__name__) from err
        sock = writer.get_extra_info("socket")
        for option in socket_options or ():
            sock.setsockopt(*option)
        return _CoalescingStream(reader, writer)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not used for llama-server upstreams")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def asyncio_transport(limits: httpx.Limits) -> httpx.AsyncHTTPTransport:
    """httpx's own transport (request/response mapping, exception mapping) over
    :class:`_AsyncioBackend`. httpx has no public knob for the network backend, so the
    connection pool it builds is swapped for one with the same limits."""
    transport = httpx.AsyncHTTPTransport(limits=limits, trust_env=False)
    transport._pool = httpcore.AsyncConnectionPool(
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=_AsyncioBackend(),
    )
    return transport
