"""Getting and keeping a replica for one request: holding it while its model loads or waits for a
swap without letting its client time out, and the next replica when one dies on the way.

``hold_for_lease`` asks the router for a lease (``ModelScheduler.acquire``). A streaming request
that has to wait gets its SSE head and then a comment line (``: waiting for model NAME
(loading)``, which every SSE client ignores) every ``server.timeouts.keepalive`` seconds, so
neither the client nor a proxy in between gives up during a load. Once that head is out, an
error can no longer be a status code: it goes out as one event in the route's API shape and
ends the stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.serve.streaming import SSE_HEADERS
from orchestrator.serve.upstream.errors import NothingAnswered, stalled_error, to_api_error

if TYPE_CHECKING:
    from orchestrator.serve.routing import Router
    from orchestrator.supervise.managed import Lease, Prefer

Send = Callable[[dict[str, Any]], Awaitable[None]]


async def next_lease(router: Router, model: str, lease: Lease, refused: NothingAnswered) -> Lease:
    """After ``lease``'s replica answered nothing: a lease on the next serving replica when it died
    (held while the model restarts), once; ``lease`` is released either way.

    Raises:
        ApiError: the replica stalled (502 ``upstream_stalled``), or it is alive and closed the
            connection on purpose (its transport error, not resent); as ``Router.acquire``.
    """
    lease.release()
    cause, stalls = refused.args
    inst = lease.instance
    stalled = stalled_error(inst.stalls - stalls, inst.warnings)
    if stalled is not None or not await router.left_serving(inst):
        raise stalled or to_api_error(cause) from None  # alive: it closed on purpose
    return await router.acquire(model)


class Held(Protocol):
    """Per-request flag: ``head_sent`` becomes True once a held stream's SSE head went out."""

    head_sent: bool


async def hold_for_lease(
    router: Router, model: str, send: Send, keepalive: float | None, held: Held, prefer: Prefer | None = None
) -> Lease:
    """A lease on a replica of ``model``, holding while it loads (the caller releases it).

    Args:
        keepalive: seconds between SSE comment lines for a streaming request; None = not a stream.
        held: ``held.head_sent`` is set once the stream's head went out; after that an error can
            only be an event (the adapter's ``stream_error``).
        prefer: the replica preference (prefix affinity), if any.

    Raises:
        ApiError: as ``ModelScheduler.acquire`` (429, 503 with the reason).
    """
    if keepalive is None:
        return await router.acquire(model, prefer)
    task = asyncio.ensure_future(router.acquire(model, prefer))
    try:
        while not (await asyncio.wait({task}, timeout=keepalive))[0]:
            if not held.head_sent:
                await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
                held.head_sent = True
            what = router.scheduler.models[model].state.value
            comment = f": waiting for model {model} ({what})\n\n".encode()
            await send({"type": "http.response.body", "body": comment, "more_body": True})
    except BaseException:
        task.cancel()
        if task.done() and not task.cancelled() and task.exception() is None:
            task.result().release()  # granted as the client left
        raise
    return task.result()
