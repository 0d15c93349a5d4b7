"""The proxy's hot path: every POST route forwarded to llama-server (``orchestrator.serve.api_routes``).

Each route is a raw ASGI endpoint (no pydantic, no Request/Response objects); one request goes:

1. refuse while draining (503 + Retry-After), check the API key (401);
2. read the body (``orchestrator.serve.body``; ``body_codec`` undoes ``Content-Encoding``): over
   ``server.max_body_bytes`` (declared, received or decoded) is 413, not a JSON object 400;
3. route by ``model`` (``orchestrator.serve.routing``): 400 / 404 ``model_not_found``;
4. check and repair the request for its route (``serve.api_routes.prepare_body``: the API's repair
   with the model's policy, ``speculative`` flattening, structured output, drafting off for token
   probabilities; the draft length of ``speculative.adaptive`` models, ``serve.draft_tuner``);
   unchanged bodies go as the client's original bytes, others are serialised once;
5. a peer (``serve.peers``), or a lease on a replica, held while the model loads (``serve.holding``);
   a long chat prompt goes to the replica and ``id_slot`` holding its prefix (``serve.prompt_cache``);
6. send upstream (``orchestrator.serve.upstream``: keep-alive, retry once on a dead pooled socket;
   a replica that answered nothing hands the request on to the next one, once);
7. answer: non-streamed bodies are parsed for ``timings`` (metrics, ``Instance.record_timings``,
   the draft-length policy) and response repair (``orchestrator.serve.response_repair``), and passed on as the original
   bytes unless repaired; streams are relayed event by event (``orchestrator.serve.streaming``,
   repaired by ``orchestrator.serve.stream_repair``).

Errors before the response starts are raised as ``ApiError`` and rendered by the app's one
exception handler; errors inside a stream become an SSE error event. A client that disconnects
cancels the work (noticed within ``WATCH_AFTER`` seconds), which closes the upstream request, and
llama-server then frees the slot.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from orchestrator.errors import ApiError
from orchestrator.serve import finish_fix, token_probs
from orchestrator.serve import response_repair as reasoning
from orchestrator.serve.api_routes import ApiRoute, prepare_body
from orchestrator.serve.body import ClientGone, dump_body, parse_body, read_body, to_utf8
from orchestrator.serve.body_codec import decode_body
from orchestrator.serve.draft_tuner import DraftTuner, Ticket
from orchestrator.serve.holding import end_held_stream, hold_for_lease, next_lease
from orchestrator.serve.metrics import NO_MODEL, ModelMetrics, ProxyMetrics
from orchestrator.serve.peers import Peer, PeerRouter
from orchestrator.serve.request_settings import RequestSettings
from orchestrator.serve.stream_repair import repair_for_stream
from orchestrator.serve.streaming import SSE_HEADERS, RelayOutcome, relay_sse
from orchestrator.serve.structured import schema_error
from orchestrator.serve.upstream import (
    NOTHING_ANSWERED,
    NothingAnswered,
    UpstreamPool,
    UpstreamTimeout,
    from_upstream_status,
    stalled_error,
    to_api_error,
)

if TYPE_CHECKING:
    from orchestrator.config.running import RunningConfig
    from orchestrator.config.schema import Config, ModelConfig
    from orchestrator.serve.auth import ApiKeys
    from orchestrator.serve.routing import Router
    from orchestrator.supervise.supervisor import Instance

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
UPSTREAM_HEADERS = {"content-type": "application/json"}
JSON_HEADER = (b"content-type", b"application/json")
CLIENT_CLOSED = 499  # status counted for a request whose client went away first (nginx's convention)
DRAIN_RETRY_AFTER = 5.0
WATCH_AFTER = 0.05  # seconds before a request starts watching for its client's disconnect (_run_watched)


class Forwarder:
    """Shared state of the POST endpoints of one app.

    Args:
        running: the running config (body limits, repair policies: read per request).
        router: model resolution and replica choice.
        pool: the upstream HTTP clients.
        metrics: the app's metrics.
        keys: API keys.
        draining: returns True once the app stops taking requests (``app.state.draining``).
        peers: the peers, the spillover rule and where requests went (``orchestrator.serve.peers``).
    """

    def __init__(
        self,
        running: RunningConfig,
        router: Router,
        pool: UpstreamPool,
        metrics: ProxyMetrics,
        keys: ApiKeys,
        draining: Callable[[], bool],
        peers: PeerRouter,
    ) -> None:
        self.router, self.pool, self.metrics, self.keys, self.draining = router, pool, metrics, keys, draining
        self.peers = peers  # peers, spillover, where requests went
        self.running = running
        self.settings = running.derive(RequestSettings.of)  # limits and repair policies, per snapshot
        self.tuner = DraftTuner(running, metrics.registry)  # speculative.adaptive: K per request

    @property
    def config(self) -> Config:
        """The running config's current snapshot (a reload applies to the next request)."""
        return self.running.current

    def endpoint(self, route: ApiRoute) -> Endpoint:
        """The ASGI endpoint for ``route`` (one of ``orchestrator.serve.api_routes.ROUTES``)."""
        return Endpoint(self, route)


@dataclass(slots=True)
class _Prepared:
    """A request ready to forward: the bytes to send upstream and the (repaired) body they encode."""

    content: bytes
    body: dict[str, Any]
    stream: bool
    thinking: bool
    model: ModelConfig
    client: dict[str, Any] = field(default_factory=dict)  # the client's own body (its tools name answer forms)
    trim_top: bool = False  # empty the answer's top_logprobs lists (token_probs.widen)
    ticket: Ticket | None = None  # the draft-length policy's choice, learned from the answer's timings


@dataclass(slots=True)
class _Watch:
    """Flags shared with the disconnect watcher (and ``head_sent``: a held stream's head went out)."""

    finished: bool = False
    disconnected: bool = False
    head_sent: bool = False


class Endpoint:
    """One POST route as an ASGI app.

    Args:
        fwd: the shared :class:`Forwarder`.
        route: what the route forwards and how (``orchestrator.serve.api_routes``).
    """

    def __init__(self, fwd: Forwarder, route: ApiRoute) -> None:
        self.fwd = fwd
        self.route = route
        self.kind = route.kind
        self.path = route.path

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        fwd = self.fwd
        started = time.monotonic()
        mm = fwd.metrics.model(NO_MODEL)
        status = 500
        try:
            if fwd.draining():
                raise ApiError(
                    503,
                    "the server is shutting down; retry on another instance or later",
                    code="draining",
                    retry_after=DRAIN_RETRY_AFTER,
                )
            fwd.keys.check(scope["headers"])
            headers = scope["headers"]
            settings = fwd.settings()
            received = await read_body(headers, receive, settings.max_body, settings.body_timeout)
            raw = to_utf8(decode_body(headers, received, settings.max_body), headers)
            body = parse_body(raw, self.path, settings.limits)
            model = fwd.peers.resolve(fwd.router, body.get("model"))
            mm = fwd.metrics.model(model.name)
            prep = self._prepare(raw, body, model, mm)
            status = await self._run_watched(prep, mm, receive, send, started)
        except ApiError as err:
            status = err.status
            raise
        except ClientGone:
            status = CLIENT_CLOSED
        finally:
            mm.request(self.kind, status)
            mm.duration.observe(time.monotonic() - started)

    def _prepare(self, raw: bytes, body: dict[str, Any], model: ModelConfig, mm: ModelMetrics) -> _Prepared:
        plan = prepare_body(self.route, body, model, self.fwd.settings().policy(model.name))
        for kind in plan.repairs:
            mm.repair(kind)
        if plan.drafting_off is not None:
            mm.drafting_off(plan.drafting_off)
        tuned, ticket = self.fwd.tuner.decide(self.kind, model, plan.body if plan.body is not None else body)
        new = tuned if tuned is not None else plan.body
        if new is None:
            return _Prepared(raw, body, body.get("stream") is True, plan.thinking, model, body, ticket=ticket)
        stream = new.get("stream") is True
        return _Prepared(dump_body(new), new, stream, plan.thinking, model, body, plan.trim_top, ticket)

    async def _run_watched(
        self, prep: _Prepared, mm: ModelMetrics, receive: Receive, send: Send, started: float
    ) -> int:
        """Run the exchange; a client disconnect cancels it (and with it the upstream request)."""
        me = asyncio.current_task()
        assert me is not None
        watch = _Watch()

        async def watcher() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    if not watch.finished:
                        watch.disconnected = True
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
            return await self._exchange(prep, mm, send, watch, started)
        except asyncio.CancelledError:
            if watch.disconnected and me.uncancel() == 0:
                return CLIENT_CLOSED
            raise
        finally:
            watch.finished = True
            timer.cancel()
            for task in tasks:
                task.cancel()

    async def _exchange(self, prep: _Prepared, mm: ModelMetrics, send: Send, watch: _Watch, started: float) -> int:
        """Forward to a peer (``PeerRouter.route``) or a serving replica; one that answered nothing
        (it just died) hands the request on to the next serving one (held while it restarts), once."""
        router, keepalive = self.fwd.router, self.fwd.settings().keepalive if prep.stream else None
        with self.fwd.peers.route(prep.model) as peer, await router.affinity(self.kind, prep.model, prep.body) as a:
            if peer is not None:
                return await self._exchange_on(peer, prep, mm, send, watch, started, refused_ok=False)
            try:
                lease = await hold_for_lease(router, prep.model.name, send, keepalive, watch, a.preference)
                try:
                    return await self._exchange_on(*a.on(lease, prep), mm, send, watch, started, refused_ok=True)
                except NothingAnswered as refused:
                    lease = await next_lease(router, prep.model.name, lease, refused)
                    return await self._exchange_on(*a.on(lease, prep), mm, send, watch, started, refused_ok=False)
                finally:
                    lease.release()
            except ApiError as error:  # a held stream's head is out: the error becomes its last event
                if not watch.head_sent:
                    raise
                return await end_held_stream(send, error, self.route.flavor)

    async def _exchange_on(
        self,
        instance: Instance | Peer,
        prep: _Prepared,
        mm: ModelMetrics,
        send: Send,
        watch: _Watch,
        started: float,
        *,
        refused_ok: bool,
    ) -> int:
        fwd = self.fwd
        upstream = fwd.pool.get(instance.base_url or "", instance.name)
        stalls = instance.stalls  # in flight on it: counted by its lease (a peer's by PeerRouter.route)
        mm.in_flight.inc()
        try:
            content = prep.content
            for attempt in (1, 2):
                try:
                    response = await upstream.open("POST", self.path, content, UPSTREAM_HEADERS, on_retry=mm.retry)
                except NOTHING_ANSWERED as exc:
                    # no response head even on a fresh connection: the replica just died
                    if refused_ok and attempt == 1:
                        raise NothingAnswered(exc, stalls) from None
                    raise
                try:
                    if response.status_code >= 400:
                        error = from_upstream_status(response.status_code, await upstream.read_body(response))
                        raise schema_error(error, prep.body)
                    if prep.stream:
                        return await self._relay(prep, mm, instance, upstream, response, send, watch, started, stalls)
                    data = await upstream.read_body(response)
                finally:
                    await response.aclose()
                data, retry = self._finish_json(prep, mm, instance, data, started, attempt)
                if retry is None:
                    break
                content = retry
            watch.finished = True
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [JSON_HEADER, (b"content-length", str(len(data)).encode())],
                }
            )
            await send({"type": "http.response.body", "body": data, "more_body": False})
            return 200
        except (UpstreamTimeout, httpx.TransportError) as exc:
            raise stalled_error(instance.stalls - stalls, instance.warnings) or to_api_error(exc) from None
        finally:
            mm.in_flight.dec()

    def _finish_json(
        self, prep: _Prepared, mm: ModelMetrics, instance: Instance | Peer, data: bytes, started: float, attempt: int
    ) -> tuple[bytes, bytes | None]:
        """Account and repair a non-streamed answer: returns ``(bytes for the client, None)``, or
        ``(_, body to resend)`` when the model's ``on_reasoning_only: retry_without_thinking`` applies
        (first attempt only)."""
        if self.route.answer == "plain":
            return data, None
        try:
            obj = json.loads(data)
        except ValueError:
            return data, None  # not ours to fix; pass it on as llama-server sent it
        if not isinstance(obj, dict):
            return data, None
        if prep.trim_top and token_probs.trim(obj):
            data = dump_body(obj)
        timings = obj.get("timings")
        if isinstance(timings, dict):
            mm.timings(timings)
            instance.record_timings(timings)
            self.fwd.tuner.learn(prep.ticket, timings)
            predicted_ms = timings.get("predicted_ms")
            if isinstance(predicted_ms, (int, float)):
                mm.ttft.observe(max(0.0, time.monotonic() - started - predicted_ms / 1000))
        else:
            mm.usage(obj.get("usage"))
        if self.route.answer != "chat":
            return finish_fix.fix_answer(self.route.path, obj, prep.client, data, mm.repair, prep.model), None
        fixed, kinds = reasoning.repair_response(obj, thinking=prep.thinking)
        for kind in kinds:
            mm.repair(kind)
        if reasoning.is_reasoning_only(fixed):
            if prep.model.on_reasoning_only == "retry_without_thinking" and prep.thinking and attempt == 1:
                mm.repair("reasoning_only_retried")
                body = dict(prep.body)
                body["chat_template_kwargs"] = {**(body.get("chat_template_kwargs") or {}), "enable_thinking": False}
                prep.body, prep.thinking = body, False
                return data, dump_body(body)
            mm.repair("reasoning_only_passed")
        return (data if fixed is obj else dump_body(fixed)), None

    async def _relay(
        self,
        prep: _Prepared,
        mm: ModelMetrics,
        instance: Instance | Peer,
        upstream: Any,
        response: httpx.Response,
        send: Send,
        watch: _Watch,
        started: float,
        stalls: int,
    ) -> int:
        if not watch.head_sent:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})

        def finished(outcome: RelayOutcome) -> None:
            watch.finished = True
            if outcome.first_chunk_at is not None:
                mm.ttft.observe(outcome.first_chunk_at - started)
            if outcome.timings is not None:
                mm.timings(outcome.timings)
                instance.record_timings(outcome.timings)
                self.fwd.tuner.learn(prep.ticket, outcome.timings)
            elif outcome.usage is not None:
                mm.usage(outcome.usage)
            for kind in outcome.repairs:
                mm.repair(kind)

        repair: Any = finish_fix.for_stream(self.route.path, prep.client, prep.model)
        if self.route.answer == "chat":
            repair = repair_for_stream(prep.body, prep.thinking, prep.model.extra_args)
        if prep.trim_top:
            repair = token_probs.TrimStream(repair)

        def map_error(exc: UpstreamTimeout | httpx.TransportError) -> ApiError:
            return stalled_error(instance.stalls - stalls, instance.warnings) or to_api_error(exc)

        outcome = await relay_sse(
            upstream.iter_body(response),
            send,
            repair=repair,
            before_last_send=finished,
            flavor=self.route.flavor,
            map_error=map_error,
        )
        return outcome.error.status if outcome.error is not None else 200
