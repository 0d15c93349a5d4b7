"""The one OpenAI-compatible endpoint: ``create_app(config, supervisor) -> FastAPI``.

Routes:

=============================  ===============================================================
``POST /v1/chat/completions``  request repair, routing, streamed or not (``orchestrator.serve.pipeline``)
``POST /v1/completions``       routing, streamed or not
``POST /v1/embeddings``        routing, passed through
``POST /v1/messages`` ...      Anthropic, Responses, Ollama and pass-through routes: one adapter each
                               (``orchestrator.serve.registry`` lists them all), one
                               ``ProxyRequest`` per request (``orchestrator.serve.pipeline``)
``GET /api/tags`` ...          Ollama's listings (``orchestrator.serve.ollama.listings``)
``GET /v1/models``             configured models and aliases, with their state and memory per device
                               (``orchestrator.serve.info``)
``POST /models/load``          ``{"model": NAME}``: load it (evicting idle models), wait until ready
``POST /models/unload``        ``{"model": NAME}``: drain and stop it (``orchestrator.serve.control.load``)
``GET /health``                200 unless a model failed or is still loading at start (503 + details)
``GET /status``                instances, models (lifecycle state, memory, idle time), device memory
``GET /peers``                 peers, their health and models, where requests went (``serve.upstream.peers``)
``GET /metrics``               Prometheus text (``orchestrator.serve.metrics``)
``POST /models/restart``       restart a model's replicas (``orchestrator.serve.control.restart``)
``GET /``, ``/ui/...``         the web console (``orchestrator.serve.console``)
=============================  ===============================================================

Every error reaches the client in its API's shape (its adapter's ``error_body``: OpenAI's
``{"error": {"message", "type", "param", "code"}}``, Anthropic's on ``/v1/messages*``), rendered
by one handler from ``ApiError``; FastAPI's own 404/405/422 and unexpected exceptions (500) are
converted to it. A 404 for an unknown path lists the routes served. ``served_by(app).draining = True``
makes new POST requests get 503 + ``Retry-After`` (``orchestrator up`` sets it on shutdown). The app owns one
``aiohttp.ClientSession`` per upstream instance (closed when the app shuts down) and its own
Prometheus registry. CORS is off unless ``server.cors_origins`` lists origins; responses are
never compressed (it would buffer streams).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import Route
from starlette.types import Scope

from orchestrator.errors import STATUS_TYPES, ApiError
from orchestrator.paths import state_dir
from orchestrator.serve.cache.prompt_cache import PromptCache
from orchestrator.serve.console.routes import Console, mount_console
from orchestrator.serve.control.load import add_model_routes
from orchestrator.serve.control.restart import add_restart_route
from orchestrator.serve.forward import Forwarder
from orchestrator.serve.http.auth import ApiKeys
from orchestrator.serve.http.guard import Guard, Refusal, RouteTable
from orchestrator.serve.info import InfoViews, add_info_routes
from orchestrator.serve.metrics import NO_MODEL, ProxyMetrics
from orchestrator.serve.pipeline import ProxyRequest, Receive, Send
from orchestrator.serve.registry import add_api_routes, error_body
from orchestrator.serve.registry import served as served_adapters
from orchestrator.serve.responses.stored import ResponseStore
from orchestrator.serve.routes import route_table, ungrouped
from orchestrator.serve.routing import Router
from orchestrator.serve.upstream.client import UpstreamPool
from orchestrator.serve.upstream.peers import PeerRouter
from orchestrator.supervise.budget import budget_for
from orchestrator.supervise.scheduler import ModelScheduler

if TYPE_CHECKING:
    from orchestrator.config.running import RunningConfig
    from orchestrator.config.schema import Config
    from orchestrator.serve.adapters.base import Adapter
    from orchestrator.serve.reload import ConfigReloader
    from orchestrator.supervise.supervisor import Supervisor

log = logging.getLogger("orchestrator.serve.app")


def create_app(config: Config, supervisor: Supervisor, scheduler: ModelScheduler | None = None) -> FastAPI:
    """Build the proxy app for ``config``, forwarding to ``supervisor``'s instances.

    Args:
        config: the validated models.yaml: the supervisor's (``supervisor.running`` owns it from
            now on; every part of the app reads its current snapshot, so a reload applies at once).
        supervisor: owns the llama-server instances (``for_model``, ``snapshot``, ``instances``).
        scheduler: loads, unloads and evicts models (``orchestrator up`` passes its own); by
            default one over ``supervisor`` with the memory budget from ``config.server``.

    Returns:
        A FastAPI app; serve it with uvicorn. :func:`served_by` gives its parts (:class:`Served`).
    """
    running = _running(config, supervisor)
    if scheduler is None:
        scheduler = ModelScheduler(supervisor, budget_for(config.server))
    pool = UpstreamPool(lambda: running.current.server.timeouts)
    metrics = ProxyMetrics(supervisor, [m.name for m in config.models], scheduler)
    router = Router(running, supervisor, scheduler)
    router.prompt_cache = PromptCache.attached(config, supervisor, scheduler, metrics.registry)
    keys = ApiKeys.following(running)
    peers = PeerRouter(running, supervisor, metrics.registry, pool)
    served = Served(scheduler, metrics, pool, router, peers, keys)
    fwd = Forwarder(running, router, pool, metrics, keys, draining=lambda: served.draining, peers=peers)
    fwd.responses_store = ResponseStore(state_dir() / "responses", lambda: running.current.server.responses_store)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        console.start()
        peers.start()
        yield
        await peers.aclose()
        await console.stop()
        await restarts.aclose()
        await pool.aclose()

    app = FastAPI(title="orchestrator", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.served = served  # for ``served_by(app)``: up's runtime and tests; no route reads app.state
    served.forwarder = fwd
    # the route table, group by group (docs/architecture.md); auth is each group's own
    off = set() if config.server.ollama_api else {"ollama"}  # a change needs a restart
    endpoints = {adapter.path: Endpoint(fwd, adapter) for adapter in served_adapters(off)}
    for path, endpoint in endpoints.items():  # other methods get FastAPI's 405
        app.router.routes.append(Route(path, endpoint, methods=["POST"]))
    app.add_middleware(Forwarded, endpoints=endpoints)  # inside CORS and the 500 handler, before the router
    table = _add_guard(app, route_table(off), running, keys, _refusal(endpoints, metrics))
    add_api_routes(app, fwd, off)  # each API's own routes besides its POSTs (listings, stored responses)
    app.add_api_route("/", _probe, methods=["HEAD"])  # agents' connectivity check (Claude Code at start)
    _add_error_handlers(app, metrics)
    _add_cors(app, config)
    views = InfoViews(peers, router.prompt_cache, fwd.tuner, lambda: served.draining)
    add_info_routes(app, running, supervisor, metrics, scheduler, views)
    add_model_routes(app, router, scheduler, lambda: served.reloader)
    restarts = add_restart_route(app, supervisor, scheduler, router)
    # last: the console's routes (and its catch-all under /ui/) come after every API route
    console = served.console = mount_console(app, config, supervisor, metrics, keys, scheduler, views)
    missing = ungrouped(app.routes, table)  # a route without a group would be open to anyone
    if missing:
        raise RuntimeError(f"routes without an auth group in orchestrator.serve.routes: {', '.join(missing)}")
    return app


@dataclass
class Served:
    """What :func:`create_app` built, once: the composition root's parts. Routes get the parts
    they need as arguments; ``orchestrator up``'s runtime and the tests reach them through
    :func:`served_by`.

    Attributes:
        draining: new requests get 503 + ``Retry-After`` (``orchestrator up`` sets it on shutdown).
        reloader: ``POST /reload``'s ``ConfigReloader`` (set by ``orchestrator up``), or None.
    """

    scheduler: ModelScheduler
    metrics: ProxyMetrics
    pool: UpstreamPool
    router: Router
    peers: PeerRouter
    keys: ApiKeys
    forwarder: Forwarder | None = None
    console: Console | None = None
    draining: bool = False
    reloader: ConfigReloader | None = None


def served_by(app: FastAPI) -> Served:
    """The parts of an app :func:`create_app` built."""
    served = app.state.served
    assert isinstance(served, Served)
    return served


async def _probe() -> Response:
    """``HEAD /``: the endpoint is up (no key needed: it says nothing but that)."""
    return Response(status_code=200)


def _running(config: Config, supervisor: Supervisor) -> RunningConfig:
    """The supervisor's running config, which the whole app reads; ``config`` must be its snapshot."""
    if config is not supervisor.config:
        raise ValueError("create_app: config must be the supervisor's own (supervisor.config)")
    return supervisor.running


def _add_guard(app: FastAPI, table: RouteTable, running: RunningConfig, keys: ApiKeys, refuse: Refusal) -> RouteTable:
    """Who may call what, for every route (forwarded POSTs too): one table, one check, in front of
    them all (inside CORS, so a preflight needs no key). Returns ``table``."""

    def setting(name: str) -> bool:
        return bool(getattr(running.current.server, name))

    app.add_middleware(Guard, table=table, keys=keys, setting=setting, refuse=refuse)
    return table


def _refusal(endpoints: dict[str, Endpoint], metrics: ProxyMetrics) -> Refusal:
    """The guard's refusal in the route's API shape; a forwarded route counts it as its request."""

    def refuse(scope: Scope, err: ApiError) -> JSONResponse:
        headers = err.headers()
        if err.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        endpoint = endpoints.get(scope["path"]) if scope["method"] == "POST" else None
        if endpoint is not None:
            metrics.model(NO_MODEL).request(endpoint.adapter.kind, err.status)
        body = error_body(scope["path"], err, Headers(scope=scope))
        return JSONResponse(body, status_code=err.status, headers=headers)

    return refuse


def _add_cors(app: FastAPI, config: Config) -> None:
    """CORS for ``server.cors_origins`` (a change needs a restart); off without origins."""
    if config.server.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(config.server.cors_origins),
            allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=["*"],
        )


def _add_error_handlers(app: FastAPI, metrics: ProxyMetrics) -> None:
    """Render every error in its route's API shape (one place); a request for a route or method
    the endpoint does not serve counts under ``endpoint="unknown"``, ``model="-"``."""

    def render(request: Request, err: ApiError) -> JSONResponse:
        headers = err.headers()
        if err.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        return JSONResponse(error_body(request.url.path, err, request.headers), status_code=err.status, headers=headers)

    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return render(request, exc)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        # statuses errors.STATUS_TYPES does not name are still the client's fault below 500
        type_ = None if exc.status_code in STATUS_TYPES or exc.status_code >= 500 else "invalid_request_error"
        message = str(exc.detail)
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}; this endpoint serves: " + ", ".join(
                served_routes(request.app)
            )
        if code is not None:  # no route took it, so no route counted it
            metrics.model(NO_MODEL).request("unknown", exc.status_code)
        response = render(request, ApiError(exc.status_code, message, code=code, type_=type_))
        for name, value in (exc.headers or {}).items():
            response.headers[name] = value
        return response

    async def validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {}
        param = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        return render(request, ApiError(400, str(first.get("msg", "invalid request")), param=param))

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error in the proxy", exc_info=exc)
        return render(
            request,
            ApiError(500, f"internal error ({type(exc).__name__}); see the orchestrator log", code="internal_error"),
        )

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(Exception, unexpected)


class Endpoint:
    """One forwarded route (its ``adapter``) as an ASGI app: one :class:`ProxyRequest` per request."""

    def __init__(self, fwd: Forwarder, adapter: Adapter) -> None:
        self.fwd = fwd
        self.adapter = adapter

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        await ProxyRequest(self.fwd, self.adapter, scope, receive, send).run()


class Forwarded:
    """ASGI middleware: a POST to a forwarded route goes straight to its :class:`Endpoint`, past
    FastAPI's router and the per-request layers it adds (exception wrapping, exit stack, body
    limit), whose work every request and every streamed chunk would pay; the request renders its
    own errors. Anything else goes on to ``app``."""

    def __init__(self, app: Callable[..., Awaitable[None]], endpoints: dict[str, Endpoint]) -> None:
        self.app = app
        self.endpoints = endpoints

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        endpoint = self.endpoints.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        await (endpoint or self.app)(scope, receive, send)


def served_routes(app: FastAPI) -> list[str]:
    """Every route ``app`` serves, as ``METHOD path``, read from its route table (the 404 message)."""
    out = []
    for route in app.routes:
        path, methods = getattr(route, "path", None), getattr(route, "methods", None)
        if path and methods:
            shown = sorted(m for m in methods if m != "HEAD") or ["HEAD"]
            out.append(f"{'|'.join(shown)} {path}")
    return out
