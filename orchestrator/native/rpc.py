"""The RPC protocol of the pinned llama.cpp, as far as we speak it: ask a ``ggml-rpc-server``
worker for its protocol version, its devices and their memory, without using it.

Wire format (``ggml/src/ggml-rpc/ggml-rpc.cpp`` at the pin): a request is ``| cmd (1 byte) |
size (u64 LE) | payload |``, a response ``| size (u64 LE) | payload |``. Every connection starts
with ``RPC_CMD_HELLO`` (command 14, fixed across versions): the payload is ``conn_caps``
(24 bytes; zeros ask for plain TCP), the answer ``major, minor, patch, pad`` + 24 bytes of
``conn_caps``. Then ``RPC_CMD_DEVICE_COUNT`` (15; no payload, answer u32) and
``RPC_CMD_GET_DEVICE_MEMORY`` (11; payload u32 device, answer u64 free + u64 total, bytes).

A worker serves **one client at a time**: its accept loop runs one connection to its end before
taking the next. A worker in use by a llama-server therefore accepts our TCP connection (the
kernel's backlog) but never answers HELLO; ``probe`` says so (``RpcBusy``) after its timeout.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass

CMD_GET_DEVICE_MEMORY = 11
CMD_HELLO = 14
CMD_DEVICE_COUNT = 15
CONN_CAPS_SIZE = 24
# A worker with more devices than this is not a worker we understand.
MAX_DEVICES = 64


class RpcError(Exception):
    """A worker could not be probed; the message says why in one line."""


class RpcUnreachable(RpcError):
    """Nothing accepts connections at the address (refused, unroutable, or the connect timed out)."""


class RpcBusy(RpcError):
    """The worker accepted the connection but did not answer HELLO in time: it serves another client."""


@dataclass(frozen=True)
class RpcDevice:
    """One device of a worker: ``free`` and ``total`` memory in bytes."""

    index: int
    free: int
    total: int


@dataclass(frozen=True)
class RpcWorkerInfo:
    """What a worker said: ``protocol`` is ``"major.minor.patch"``."""

    endpoint: str
    protocol: str
    devices: tuple[RpcDevice, ...]

    @property
    def free_bytes(self) -> int:
        """Free memory over all devices (bytes)."""
        return sum(d.free for d in self.devices)


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """``"host:port"`` -> ``(host, port)``; raises ``ValueError`` with the reason otherwise.

    llama.cpp splits at the first ``:`` (``parse_endpoint`` in ggml-rpc.cpp), so an IPv6
    literal cannot be given; neither can it here.
    """
    host, sep, port = endpoint.partition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{endpoint!r} is not host:port (e.g. 192.168.1.20:50052)")
    return host, int(port)


async def probe(endpoint: str, timeout: float, expected: str | None = None) -> RpcWorkerInfo:
    """HELLO, device count and each device's memory from the worker at ``endpoint`` (``host:port``).

    Args:
        endpoint: ``host:port`` of a ``ggml-rpc-server``.
        timeout: seconds for the whole exchange.
        expected: our protocol; a worker speaking another is asked nothing after HELLO (its
            commands may differ), and its info has no devices (see ``protocol_problem``).

    Raises:
        RpcUnreachable: the connection failed.
        RpcBusy: connected, but no HELLO answer within ``timeout`` (it serves another client).
        RpcError: the peer closed or answered something that is not the RPC protocol.
    """
    host, port = split_endpoint(endpoint)
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, TimeoutError) as err:
        raise RpcUnreachable(f"RPC worker {endpoint} is not reachable: {err or 'connect timed out'}") from None
    try:
        async with asyncio.timeout(timeout):
            hello = await _call(reader, writer, CMD_HELLO, bytes(CONN_CAPS_SIZE), endpoint, busy=True)
            if len(hello) < 3:
                raise RpcError(f"{endpoint} answered HELLO with {len(hello)} bytes; not a ggml-rpc-server")
            protocol = f"{hello[0]}.{hello[1]}.{hello[2]}"
            if expected is not None and protocol != expected:
                return RpcWorkerInfo(endpoint, protocol, ())
            (count,) = struct.unpack("<I", await _call(reader, writer, CMD_DEVICE_COUNT, b"", endpoint))
            if count > MAX_DEVICES:
                raise RpcError(f"{endpoint} reports {count} devices; not a ggml-rpc-server we understand")
            devices = []
            for index in range(count):
                raw = await _call(reader, writer, CMD_GET_DEVICE_MEMORY, struct.pack("<I", index), endpoint)
                free, total = struct.unpack("<QQ", raw[:16])
                devices.append(RpcDevice(index, free, total))
    except TimeoutError:
        raise RpcBusy(
            f"RPC worker {endpoint} accepted the connection but did not answer within {timeout:g} s: "
            "it serves another client (a worker serves one llama-server at a time)"
        ) from None
    finally:
        writer.close()
    return RpcWorkerInfo(endpoint, protocol, tuple(devices))


async def _call(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    cmd: int,
    payload: bytes,
    endpoint: str,
    *,
    busy: bool = False,
) -> bytes:
    writer.write(struct.pack("<BQ", cmd, len(payload)) + payload)
    try:
        await writer.drain()
        (size,) = struct.unpack("<Q", await reader.readexactly(8))
        if size > 1 << 20:
            raise RpcError(f"{endpoint} answered a {size}-byte message; not a ggml-rpc-server")
        return await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError) as err:
        what = "closed the connection" if isinstance(err, asyncio.IncompleteReadError) else str(err)
        hint = " (another RPC protocol version?)" if busy else ""
        raise RpcError(f"RPC worker {endpoint} {what} during the handshake{hint}") from None


async def reachable(endpoint: str, timeout: float) -> str | None:
    """None when something accepts TCP connections at ``endpoint``, else why not (one line).

    A worker in use cannot be probed (one client at a time), so while a llama-server uses it
    this is the check that it still lives: a dead worker's port refuses (or, on a dead host,
    the connect times out). The connection is closed at once without a byte; the worker drops
    it when it gets to it.
    """
    host, port = split_endpoint(endpoint)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, TimeoutError) as err:
        return f"RPC worker {endpoint} is not reachable: {err or 'connect timed out'}"
    writer.close()
    return None


def protocol_problem(info: RpcWorkerInfo, expected: str | None) -> str | None:
    """None when ``info.protocol`` is ``expected`` (our build's, from its manifest), else the refusal.

    The protocol changes between llama.cpp versions (the patch number with every new graph
    operation), and a mismatch fails deep inside a model load, so any difference is refused.
    ``expected`` None (a build without the field) accepts anything.
    """
    if expected is None or info.protocol == expected:
        return None
    return (
        f"RPC worker {info.endpoint} speaks RPC protocol {info.protocol}, this build speaks {expected}: "
        "it runs another llama.cpp version; run `orchestrator worker` from the same orchestrator "
        "version (same pin and build) on that machine"
    )
