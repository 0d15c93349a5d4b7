"""Getting and keeping a replica for one request: holding it while its model loads or waits for a
swap without letting its client time out, and the next replica when one dies on the way.

``hold_for_lease`` asks the router for a lease (``ModelScheduler.acquire``); ``audibly`` is how a
streaming request waits for anything (the lease, then a slot on the replica): after a second it
gets its head, then a keepalive line in its API's framing (an SSE comment such as ``: waiting for
model NAME (loading)``, which every SSE client ignores; Ollama's empty NDJSON chunk) every
``server.timeouts.keepalive`` seconds, so neither the client nor a proxy in between gives up.
Once that head is out, an error can no longer be a status code: it goes out as one event in the
route's API shape and ends the stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from orchestrator.serve.upstream.errors import NothingAnswered, died_working, stalled_error, to_api_error

if TYPE_CHECKING:
    from orchestrator.serve.routing import Router
    from orchestrator.supervise.managed import Lease, Prefer

Send = Callable[[dict[str, Any]], Awaitable[None]]
T = TypeVar("T")
Drop = Callable[[Any], Any]
# A stream that has to wait (a model loading, a queue for a slot) sends its head this soon: the
# client sees the first byte within a second or two, never after a whole keepalive interval.
FIRST_BYTE_S = 1.0


async def next_lease(router: Router, model: str, lease: Lease, refused: NothingAnswered) -> Lease:
    """After ``lease``'s replica answered nothing: a lease on the next serving replica when it died
    or froze (and was restarted) before the request started (held while the model restarts), once;
    ``lease`` is released either way.

    Raises:
        ApiError: 502 ``upstream_stalled`` or ``upstream_died`` when the replica may have been
            working on it (a whole answer past ``RESEND_WITHIN_S``, or one it stalled on); its
            transport error when it is alive and closed the connection on purpose (not resent);
            as ``Router.acquire``.
    """
    lease.release()
    cause, stalls, may_have_worked = refused.args
    inst = lease.instance
    stalled = stalled_error(inst.stalls - stalls, inst.warnings)
    if may_have_worked:
        raise (stalled or died_working(inst.name)) from None
    if not await router.left_serving(inst) and stalled is None:
        raise to_api_error(cause) from None  # alive: it closed on purpose
    return await router.acquire(model)  # it died or froze before the request started: the successor


class Held(Protocol):
    """Per-request flag: ``head_sent`` becomes True once a waiting stream's head went out."""

    head_sent: bool


@dataclass(frozen=True)
class Beat:
    """How a waiting stream stays audible: its ``head`` (status 200 and the API's stream headers)
    after ``first`` seconds, then one ``line(what)`` (an SSE comment, Ollama's empty NDJSON chunk:
    the adapter's ``keepalive``) every ``every`` seconds."""

    send: Send
    head: list[tuple[bytes, bytes]]
    line: Callable[[str], bytes]
    every: float
    first: float = FIRST_BYTE_S


async def audibly(work: Awaitable[T], beat: Beat | None, held: Held, what: Callable[[], str], drop: Drop) -> T:
    """Await ``work``; meanwhile, for a stream (``beat``), send its head within ``beat.first`` s and a
    keepalive line every ``beat.every`` s, so neither the client nor a proxy in between gives up.
    What ``work`` produced after the client left is handed to ``drop`` (a lease released, a
    response closed)."""
    if beat is None:
        return await work
    task = asyncio.ensure_future(work)
    wait = min(beat.first, beat.every)
    try:
        while not (await asyncio.wait({task}, timeout=wait))[0]:
            if not held.head_sent:
                await beat.send({"type": "http.response.start", "status": 200, "headers": beat.head})
                held.head_sent = True
            await beat.send({"type": "http.response.body", "body": beat.line(what()), "more_body": True})
            wait = beat.every
    except BaseException:
        task.cancel()
        if task.done() and not task.cancelled() and task.exception() is None:
            drop(task.result())  # done as the client left
        raise
    return task.result()


async def hold_for_lease(
    router: Router, model: str, beat: Beat | None, held: Held, prefer: Prefer | None = None
) -> Lease:
    """A lease on a replica of ``model``, holding while it loads (the caller releases it).

    Args:
        beat: how a streaming request stays audible while it waits; None = not a stream.
        held: ``held.head_sent`` is set once the stream's head went out; after that an error can
            only be an event (the adapter's ``stream_error``).
        prefer: the replica preference (prefix affinity), if any.

    Raises:
        ApiError: as ``ModelScheduler.acquire`` (429, 503 with the reason).
    """

    def what() -> str:
        return f"waiting for model {model} ({router.scheduler.models[model].state.value})"

    return await audibly(router.acquire(model, prefer), beat, held, what, lambda lease: lease.release())
