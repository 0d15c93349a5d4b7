"""One request through the proxy, whatever its API: :class:`ProxyRequest`.

The API's part of a request is its ``Call`` (``orchestrator.serve.adapters.base``: opened by the
API's adapter, bound to llama-server's route); this object owns everything the APIs share, in
this order:

1. **drain**: after SIGINT/SIGTERM a request gets 503 + ``Retry-After``;
2. **auth**: ``server.api_keys`` (401), the browser guard (403);
3. **body**: read and decoded (``serve.http.body``, ``body_codec``): 413, 415, 400; ``parse_body``
   checks it for every API (``serve.http.shapes``: types, 64-bit integers, ``request_limits``);
4. **open**: the API's adapter opens the request's call (the internal request: llama-server's
   route and body), which recalls what it refers to (a stored Responses turn); **route**: ``model`` -> model
   config (``orchestrator.serve.routing``, peers' models), or without ``model`` its conversation's;
5. **repair**: the call's ``prepare`` (its route's checks) with the model's repair policy (unchanged bodies
   go as the client's bytes); a prompt too long for the slot is refused before any replica sees it;
6. **speculation**: :meth:`ProxyRequest.speculation` is the one place that sets this request's
   ``speculative.n_max`` (the draft-length policy, ``serve.draft_tuner``); the answer's ``timings``
   come back to it through :meth:`ProxyRequest.account` and the stream's end;
7. **peer or lease**: a peer (``serve.peers``: peer-only models, spillover), else a lease on a
   replica, held while the model loads (``serve.holding``), on the replica and slot holding the
   prompt's prefix (``serve.prompt_cache``); in-flight counts while it runs;
8. **upstream**: a reasoning effort the replica's template would refuse goes to the nearest level it
   accepts (``_fit_effort``); ``orchestrator.serve.upstream.client`` (keep-alive, resend on a dead pooled socket); a
   replica that answered nothing (it just died) hands the request to the next serving one, once;
9. **answer**: whole answers through the call's ``whole`` (accounting ``timings``/``usage``; an
   answer may be asked again once, a ``Resend``: an answer that ended inside its thinking continued),
   streams through its ``codec`` (``orchestrator.serve.streaming.relay``);
10. **metrics**: requests, durations, TTFT, repairs, tokens, session cache hits; the drafting watch.

Errors before the answer starts are rendered in the API's shape; inside a stream they are its
last event. A client that disconnects cancels the work (noticed within ``WATCH_AFTER`` s): the
upstream request closes and llama-server frees the slot.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import aiohttp

from orchestrator.errors import ApiError
from orchestrator.serve.adapters.base import Adapter, Call
from orchestrator.serve.adapters.route import Resend
from orchestrator.serve.cache.prompt_cache import Affinity
from orchestrator.serve.cache.sessions import usage_counts
from orchestrator.serve.holding import Beat, audibly, hold_for_lease, next_lease
from orchestrator.serve.http.body import ClientGone, dump_body, read_json
from orchestrator.serve.metrics import NO_MODEL, ModelMetrics
from orchestrator.serve.repair import efforts
from orchestrator.serve.repair.agent_errors import MAX_TOKEN_BYTES, text_bytes, too_long
from orchestrator.serve.repair.structured import schema_error
from orchestrator.serve.streaming import RelayOutcome, relay
from orchestrator.serve.upstream.client import Upstream
from orchestrator.serve.upstream.errors import (
    NOTHING_ANSWERED,
    UPSTREAM_FAILURES,
    NothingAnswered,
    from_upstream_status,
    stalled_error,
    to_api_error,
)

if TYPE_CHECKING:
    from orchestrator.config.schema import ModelConfig
    from orchestrator.serve.drafting.tuner import Ticket
    from orchestrator.serve.forward import Forwarder
    from orchestrator.serve.request_settings import RequestSettings
    from orchestrator.serve.routing import Router
    from orchestrator.serve.upstream.peers import Peer
    from orchestrator.supervise.calls import Call as Watched
    from orchestrator.supervise.calls import Calls
    from orchestrator.supervise.managed import Lease
    from orchestrator.supervise.supervisor import Instance

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

UPSTREAM_HEADERS = {"content-type": "application/json"}
JSON_HEADER = (b"content-type", b"application/json")
# Status counted for a request whose client went away before the answer (nginx's convention).
CLIENT_CLOSED = 499
DRAIN_RETRY_AFTER = 5.0
WAITING_SLOT, WAITING_RESTART = "waiting for a free slot", "waiting for a replica to restart"
# A whole (non-streamed) request whose replica closed without an answer is resent to the next
# replica only within this many seconds of sending it (a replica that died or froze with it queued,
# or at most this much work redone): past it, the replica may have been working on it (its head
# comes only with the answer), and the client gets 502 upstream_died to retry, not a silent re-run.
RESEND_WITHIN_S = 5.0
# What asking a replica which effort levels its template takes may meet (``_fit_effort``)
_PROBE_FAILURES: tuple[type[Exception], ...] = (*UPSTREAM_FAILURES, *NOTHING_ANSWERED, aiohttp.ClientError)
# Seconds before a request starts watching for its client's disconnect (see _run_watched).
WATCH_AFTER = 0.05


class Abandoned(Exception):
    """The supervisor's watch gave up on the slot running this request (``supervise.calls.Call.abandon``): its
    ``reason``, and whether part of the answer may have reached the client (``answered``)."""

    def __init__(self, reason: str, *, answered: bool) -> None:
        super().__init__(reason)
        self.reason, self.answered = reason, answered


class Outgoing:
    """What goes upstream: llama-server's ``path``, the ``body``, the ``content`` bytes it encodes."""

    __slots__ = ("body", "content", "path")

    def __init__(self, path: str, body: dict[str, Any], content: bytes) -> None:
        self.path, self.body, self.content = path, body, content


class ProxyRequest:
    """One request, from its first byte to its metrics (module docstring).

    Args:
        fwd: the endpoint's shared state (``orchestrator.serve.forward.Forwarder``).
        api: the adapter of the API the client speaks, which opens the request's ``Call``.
        scope, receive, send: the ASGI request.
    """

    def __init__(self, fwd: Forwarder, api: Adapter, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        self.fwd, self.api, self.scope, self.receive, self.send = fwd, api, scope, receive, send
        self.router: Router = fwd.router
        self.started = time.monotonic()
        self.mm: ModelMetrics = fwd.metrics.model(NO_MODEL)
        self.status = 500
        self.model: ModelConfig
        self.call: Call  # the API's part, bound to llama-server's route: opened from the body
        self.out: Outgoing
        self.settings: RequestSettings  # the running config's request settings, one snapshot per request
        self.stream = self.thinking = self.trim_top = False
        self.attempt = 1
        self.continued: dict[str, Any] | None = None  # an answer that ended in its thinking, continued once
        self.warnings: list[str] = []  # Warning headers of a whole answer (adapters: ``warn``)
        self.instance: Instance | Peer | None = None
        self.timings: dict[str, Any] | None = None  # the answer's llama-server timings, once known
        self.ticket: Ticket | None = None  # the draft-length policy's choice for this request
        self.drafting_off: str | None = None  # why the proxy set K = 0 itself (token probabilities)
        # the disconnect watch: the answer is complete / the client left / a (held) stream's head is out
        self.finished = self.disconnected = self.head_sent = False

    @property
    def body(self) -> dict[str, Any]:
        """The internal body sent upstream."""
        return self.out.body

    @property
    def client_body(self) -> dict[str, Any]:
        """The internal body before repair (its tools, its limits)."""
        return self.call.body

    @property
    def responses_store(self) -> Any:
        """The endpoint's stored Responses (``Forwarder.responses_store``)."""
        return self.fwd.responses_store

    async def run(self) -> None:
        """Serve the request; every outcome is counted once in the model's metrics."""
        try:
            await self._serve()
        except ApiError as err:
            self.status = err.status
            await (self._end_stream(err) if self.head_sent else self._send_error(err))
        except ClientGone:
            self.status = CLIENT_CLOSED
        finally:
            self.mm.request(self.api.kind, self.status)
            self.mm.duration.observe(time.monotonic() - self.started)

    async def _serve(self) -> None:
        fwd = self.fwd
        if fwd.draining():
            raise ApiError(
                503,
                "the server is shutting down; retry on another instance or later",
                code="draining",
                retry_after=DRAIN_RETRY_AFTER,
            )
        headers = self.scope["headers"]
        settings = self.settings = fwd.settings()  # one snapshot for the whole request
        client, raw = await read_json(headers, self.receive, settings, self.api.shape)
        call = self.call = self.api.open(client, raw)
        self.api = call.api  # errors from here on in the shape of the API that answers
        await call.recall(self)
        self.model = self._route(call)
        self.mm = fwd.metrics.model(self.model.name)
        local = await call.local(self, client)
        if local is not None:
            self.status = await self._send_whole(dump_body(local))
            return
        self._prepare(call)
        self._check_fits()
        self.speculation()
        self.status = await self._run_watched()

    def _route(self, call: Call) -> ModelConfig:
        """The model ``call`` goes to: the one its ``model`` names, else its conversation's
        (``Router.unnamed``); remembered as its conversation's model. llama-server names itself
        (its ``--alias``) in every answer, so a request without ``model`` still hears which
        model answered."""
        body = call.body
        session = call.session_key(body, self.scope["headers"])
        name = body.get("model")
        if name is None or name == "":
            model = self.router.unnamed(body, session)
        else:
            model = self.fwd.peers.resolve(self.router, name)
        self.router.remember(body, session, model)
        return model

    def _prepare(self, call: Call) -> None:
        """The route's checks and repairs (``Call.prepare``) with the model's policy."""
        plan = call.prepare(self.model, self.settings.policy(self.model.name))
        for kind in plan.repairs:
            self.mm.repair(kind)
        self.drafting_off = plan.drafting_off
        if plan.drafting_off is not None:
            self.mm.drafting_off(plan.drafting_off)
        if plan.body is not None:
            body, content = plan.body, dump_body(plan.body)
        else:
            body, raw = call.body, call.internal.raw
            content = raw if raw is not None else dump_body(body)
        self.out = Outgoing(call.internal.path, body, content)
        self.stream = body.get("stream") is True
        self.thinking, self.trim_top = plan.thinking, plan.trim_top

    def _check_fits(self) -> None:
        """A prompt that cannot fit the slot is refused before any replica tokenizes it."""
        model = self.model
        slot_ctx = model.ctx_size // model.parallel
        if not self.call.generates or len(self.out.content) <= slot_ctx * MAX_TOKEN_BYTES:
            return  # embeddings, token counts, tokenize: not one prompt in one slot
        if model.name in self.fwd.peers.local_names:  # a peer-only model's context is the peer's
            error = too_long(text_bytes(self.out.body), slot_ctx)
            if error is not None:
                raise error

    def speculation(self) -> None:
        """Per-request speculation fields: the draft-length policy (``serve.draft_tuner``) sets this
        request's ``speculative.n_max`` on an adaptive model, unless the client set one or drafting
        is off for it (token probabilities); its ticket learns from the answer's timings."""
        call = self.call
        tuned, self.ticket = self.fwd.tuner.decide(
            call.route.kind if call.generates else None, self.model, self.out.body, self.drafting_off
        )
        if tuned is not None:
            self.out = Outgoing(self.out.path, tuned, dump_body(tuned))

    def count_repair(self, kind: str) -> None:
        self.mm.repair(kind)  # adapters report their repairs here

    def warn(self, header: str) -> None:
        self.warnings.append(header)  # a whole answer's head is sent after the adapter fixed it

    def keep_alive(self, seconds: float) -> None:
        if self.model.name in self.router.scheduler.models:  # a peer's or an adopted model: not ours
            self.router.scheduler.keep_alive(self.model.name, seconds)

    async def load(self) -> None:
        if self.model.name in self.router.scheduler.models:
            (await self.router.acquire(self.model.name)).release()

    def account(self, answer: dict[str, Any]) -> None:
        """A whole answer's ``timings`` (metrics, drafting watch, draft policy, TTFT), else its ``usage``."""
        timings = answer.get("timings")
        if isinstance(timings, dict):
            self._timings(timings)
            predicted_ms = timings.get("predicted_ms")
            if isinstance(predicted_ms, (int, float)):
                self.mm.ttft.observe(max(0.0, time.monotonic() - self.started - predicted_ms / 1000))
        else:
            self._usage(answer.get("usage"))

    def _timings(self, timings: dict[str, Any]) -> None:
        self.timings = timings
        self.mm.timings(timings)
        session = self.call.session_key(self.out.body, self.scope["headers"])
        self.router.count_session(self.model.name, session, self.out.body, timings)
        if self.instance is not None:
            self.instance.record_timings(timings)
        self.fwd.tuner.learn(self.ticket, timings)

    def _usage(self, usage: Any) -> None:
        """An answer without ``timings`` (llama-server's Responses): its ``usage`` to the metrics,
        and its cached and processed prompt tokens to its session (``/status``)."""
        self.mm.usage(usage)
        counts = usage_counts(usage)
        if counts is not None and self.call.generates:
            session = self.call.session_key(self.out.body, self.scope["headers"])
            self.router.count_session(self.model.name, session, self.out.body, counts)

    async def _end_stream(self, err: ApiError) -> None:
        """End a stream whose head already went out with ``err`` as its API's last event."""
        await self.send({"type": "http.response.body", "body": self.api.stream_error(err), "more_body": False})

    async def _send_error(self, err: ApiError) -> None:
        headers = err.headers()
        if err.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        data = json.dumps(self.api.error_body(err), ensure_ascii=False, separators=(",", ":")).encode()
        extra = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        await self._send_whole(data, err.status, extra)

    async def _send_whole(self, data: bytes, status: int = 200, extra: list[tuple[bytes, bytes]] | None = None) -> int:
        self.finished = True
        head = [JSON_HEADER, (b"content-length", str(len(data)).encode()), *(extra or [])]
        await self.send({"type": "http.response.start", "status": status, "headers": head})
        await self.send({"type": "http.response.body", "body": data, "more_body": False})
        return status

    async def _run_watched(self) -> int:
        """Run the exchange; a client disconnect cancels it (and with it the upstream request)."""
        me = asyncio.current_task()
        assert me is not None

        async def watcher() -> None:
            while True:
                message = await self.receive()
                if message["type"] == "http.disconnect":
                    if not self.finished:
                        self.disconnected = True
                        me.cancel()
                    return

        tasks: list[asyncio.Task[None]] = []

        def start_watching() -> None:
            tasks.append(loop.create_task(watcher()))

        # Most requests finish before this; they never pay for a watcher task. A disconnect is
        # still noticed within WATCH_AFTER seconds plus one loop turn.
        loop = asyncio.get_running_loop()
        timer = loop.call_later(WATCH_AFTER, start_watching)
        try:
            return await self._exchange()
        except asyncio.CancelledError:
            if self.disconnected and me.uncancel() == 0:
                return CLIENT_CLOSED
            raise
        finally:
            self.finished = True
            timer.cancel()
            for task in tasks:
                task.cancel()

    async def _exchange(self) -> int:
        """Forward to a peer (``PeerRouter.route``) or a serving replica; one that answered nothing
        (it just died) hands the request on to the next serving one (held while it restarts), once."""
        router, model = self.router, self.model
        with self.fwd.peers.route(model) as peer, await self._affinity() as a:
            if peer is not None:
                return await self._exchange_on(peer, self.out, refused_ok=False)
            try:
                lease = await hold_for_lease(router, model.name, self._beat(), self, a.preference)
                try:
                    return await self._exchange_on(*a.on(lease, self.out), refused_ok=True)
                except NothingAnswered as refused:
                    restarting = next_lease(router, model.name, lease, refused)  # audible while it restarts
                    lease = await audibly(restarting, self._beat(), self, lambda: WAITING_RESTART, _release)
                    return await self._exchange_on(*a.on(lease, self.out), refused_ok=False)
                finally:
                    lease.release()
            except ApiError as error:  # a held stream's head is out: the error becomes its last event
                if not self.head_sent:
                    raise
                await self._end_stream(error)
                return error.status

    def _may_have_worked(self, sent: float, stalled: bool, started: bool | None) -> bool:
        """Whether a replica that closed without a response head may have worked on this request:
        a stream's head comes when a slot takes it, so no head means no work; a whole answer's head
        comes at its end: one that no slot ever took (``started``: the child's ``/slots`` through
        ``Calls.started``) did none, else (a child that does not say) only one that failed within
        ``RESEND_WITHIN_S``, unstalled, did none."""
        if self.stream:
            return False
        if started is not None:
            return started
        return stalled or time.monotonic() - sent > RESEND_WITHIN_S

    def _beat(self) -> Beat | None:
        """How this request stays audible while it waits (``holding.audibly``); None when not a stream."""
        if not self.stream:
            return None
        line = functools.partial(self.call.keepalive, self)
        return Beat(self.send, self.call.stream_headers, line, self.settings.keepalive)

    async def _affinity(self) -> Affinity:
        """Prefix affinity (``serve.prompt_cache``): the slot (and replica) for this request."""
        call, body = self.call, self.out.body
        session = call.session_key(body, self.scope["headers"])
        return await self.router.affinity(call.chat_of(), self.model, body, session)

    async def _exchange_on(self, instance: Instance | Peer, out: Outgoing, *, refused_ok: bool) -> int:
        upstream = self.fwd.pool.get(instance.base_url or "", instance.name, instance.child_key)
        stalls = instance.stalls  # in flight on it: counted by its lease (a peer's by PeerRouter.route)
        calls: Calls | None = getattr(instance, "calls", None)  # a peer's requests are not watched here
        self.instance, self.out, self.attempt = instance, out, 1
        self.mm.in_flight.inc()
        resent = False
        try:
            out = self.out = await self._fit_effort(upstream, out)
            while True:
                watched = calls.open(out.body.get("id_slot")) if calls is not None else None
                try:
                    first = refused_ok and self.attempt == 1
                    answer = await self._attempt(upstream, out, (calls, watched), stalls, refused_ok=first)
                except Abandoned as abandoned:
                    if abandoned.answered or resent:
                        why = f"{instance.name}: {abandoned.reason}"
                        raise ApiError(502, why, code="upstream_no_progress") from None
                    resent = True  # nothing of it reached the client: once more, on a freed slot
                    self.mm.retry()
                    continue
                finally:
                    if calls is not None and watched is not None:
                        calls.close(watched)
                if not isinstance(answer, Resend):
                    return answer
                if self.attempt == 2:
                    raise AssertionError("a reasoning-only answer is resent once")  # pragma: no cover
                self.attempt = 2
                out = self.out = Outgoing(out.path, answer.body, dump_body(answer.body))
                self.thinking = answer.thinking
        except UPSTREAM_FAILURES as exc:
            raise stalled_error(instance.stalls - stalls, instance.warnings) or to_api_error(exc) from None
        finally:
            self.mm.in_flight.dec()

    async def _attempt(
        self,
        upstream: Upstream,
        out: Outgoing,
        watch: tuple[Calls | None, Watched | None],
        stalls: int,
        *,
        refused_ok: bool,
    ) -> int | Resend:
        """Send ``out`` once: the status sent to the client, or a ``Resend`` of a reasoning-only answer.

        Raises:
            NothingAnswered: (``refused_ok``) no response head: the replica died or froze.
            Abandoned: the supervisor's watch gave up on the slot running ``watched`` (no progress).
        """
        instance = self.instance
        assert instance is not None
        calls, watched = watch
        headers = UPSTREAM_HEADERS if watched is None else {**UPSTREAM_HEADERS, "x-request-id": watched.id}
        sent = time.monotonic()
        response: aiohttp.ClientResponse | None = None
        try:
            try:  # llama-server sends its head only once a slot takes the request: a queue is audible
                opening = upstream.open("POST", out.path, out.content, headers, on_retry=self.mm.retry)
                response = await audibly(opening, self._beat(), self, lambda: WAITING_SLOT, _release)
            except NOTHING_ANSWERED as exc:
                # no response head even on a fresh connection: the replica just died
                if refused_ok:
                    started = calls.started(watched) if calls is not None and watched is not None else None
                    worked = self._may_have_worked(sent, instance.stalls > stalls, started)
                    raise NothingAnswered(exc, stalls, worked) from None
                raise
            if self.stream and watched is not None:
                watched.started = True  # a stream's head comes when a slot takes it
            try:
                if response.status >= 400:
                    error = from_upstream_status(response.status, await upstream.read_body(response))
                    raise self.call.upstream_error(schema_error(error, out.body))
                if self.stream:
                    return await self._relay(upstream, response, stalls)
                data = await upstream.read_body(response)
            finally:
                response.release()
            answer = self.call.whole(self, data)
            if isinstance(answer, Resend):
                return answer
            return await self._send_whole(answer, extra=[(b"warning", w.encode()) for w in self.warnings])
        except asyncio.CancelledError:
            if watched is None or watched.reason is None or self.disconnected:
                raise
            me = asyncio.current_task()
            if me is not None:
                me.uncancel()
            # a stream whose head came may have sent tokens, a whole answer may be on its way: not sent again
            answered = self.finished or (self.stream and response is not None)
            raise Abandoned(watched.reason, answered=answered) from None

    async def _fit_effort(self, upstream: Upstream, out: Outgoing) -> Outgoing:
        """A reasoning effort the replica's chat template would refuse, on the nearest level it
        accepts (``repair.efforts``; the levels are learned once per replica,
        ``upstream.template_efforts``): counted as a repair."""
        if efforts.effort_field(out.body) is None:  # also token counts and /apply-template: the chat's prompt
            return out
        try:
            accepted = await self.fwd.efforts.accepted(upstream)
        except _PROBE_FAILURES:
            return out  # the request itself meets the same fault, and answers it in its own shape
        mapped = efforts.map_body(out.body, accepted)
        if mapped is None:
            return out
        self.mm.repair(efforts.KIND)
        return Outgoing(out.path, mapped, dump_body(mapped))

    async def _relay(self, upstream: Upstream, response: aiohttp.ClientResponse, stalls: int) -> int:
        if not self.head_sent:
            await self.send({"type": "http.response.start", "status": 200, "headers": self.call.stream_headers})
        instance = self.instance
        assert instance is not None

        def finished(outcome: RelayOutcome) -> None:
            self.finished = True
            if outcome.first_chunk_at is not None:
                self.mm.ttft.observe(outcome.first_chunk_at - self.started)
            if outcome.timings is not None:
                self._timings(outcome.timings)
            elif outcome.usage is not None:
                self._usage(outcome.usage)
            for kind in outcome.repairs:
                self.mm.repair(kind)

        def map_error(exc: Exception) -> ApiError:
            return stalled_error(instance.stalls - stalls, instance.warnings) or to_api_error(exc)

        codec = self.call.codec(self)
        outcome = await relay(
            upstream.iter_body(response), self.send, codec, before_last_send=finished, map_error=map_error
        )
        return outcome.error.status if outcome.error is not None else 200


def _release(late: aiohttp.ClientResponse | Lease) -> None:
    late.release()  # a response head or a lease that came after the client left
