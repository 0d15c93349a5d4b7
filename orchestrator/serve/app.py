"""The one OpenAI-compatible endpoint: ``create_app(config, supervisor) -> FastAPI``.

Routes:

=============================  ===============================================================
``POST /v1/chat/completions``  request repair, routing, streamed or not (``orchestrator.serve.forward``)
``POST /v1/completions``       routing, streamed or not
``POST /v1/embeddings``        routing, passed through
``GET /v1/models``             configured models and aliases, with their state
``GET /health``                200 when every model has a serving replica, else 503 with details
``GET /status``                the supervisor's instance table (``Supervisor.snapshot()``) as JSON
``GET /metrics``               Prometheus text (``orchestrator.serve.metrics``)
=============================  ===============================================================

Every error reaches the client in the OpenAI shape ``{"error": {"message", "type", "param",
"code"}}``, rendered by one handler from ``ApiError``; FastAPI's own 404/405/422 and unexpected
exceptions (500) are converted to it. ``app.state.draining = True`` makes new POST requests get
503 + ``Retry-After`` (``orchestrator up`` sets it on shutdown). The app owns one
``httpx.AsyncClient`` per upstream instance (closed when the app shuts down) and its own
Prometheus registry. CORS is off unless ``server.cors_origins`` lists origins; responses are
never compressed (it would buffer streams).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from orchestrator.errors import STATUS_TYPES, ApiError
from orchestrator.serve.auth import ApiKeys
from orchestrator.serve.forward import Forwarder
from orchestrator.serve.metrics import CONTENT_TYPE, ProxyMetrics
from orchestrator.serve.routing import RETRY_AFTER, Router
from orchestrator.serve.upstream import UpstreamPool
from orchestrator.supervise.supervisor import SERVING

if TYPE_CHECKING:
    from orchestrator.config.schema import Config
    from orchestrator.supervise.supervisor import Supervisor

log = logging.getLogger("orchestrator.serve.app")


def create_app(config: Config, supervisor: Supervisor) -> FastAPI:
    """Build the proxy app for ``config``, forwarding to ``supervisor``'s instances.

    Args:
        config: the validated models.yaml.
        supervisor: owns the llama-server instances (``pick``, ``wait_for_replica``,
            ``for_model``, ``snapshot``, ``instances``).

    Returns:
        A FastAPI app; serve it with uvicorn. ``app.state`` has ``draining`` (bool), ``metrics``
        (``ProxyMetrics``), ``pool`` (``UpstreamPool``) and ``router`` (``Router``).
    """
    pool = UpstreamPool(config.server.timeouts)
    metrics = ProxyMetrics(supervisor, [m.name for m in config.models])
    router = Router(config, supervisor)
    keys = ApiKeys(config.server.api_keys)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        await pool.aclose()

    app = FastAPI(title="orchestrator", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.draining = False
    app.state.metrics = metrics
    app.state.pool = pool
    app.state.router = router
    fwd = Forwarder(config, router, pool, metrics, keys, draining=lambda: bool(app.state.draining))
    for path, kind in (
        ("/v1/chat/completions", "chat"),
        ("/v1/completions", "completions"),
        ("/v1/embeddings", "embeddings"),
    ):
        app.router.routes.append(Route(path, fwd.endpoint(kind), methods=["POST"]))
    _add_error_handlers(app)
    if config.server.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(config.server.cors_origins),
            allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=["*"],
        )
    created = int(time.time())

    def guard(request: Request, required: bool = True) -> None:
        if required:
            keys.check(request.scope["headers"])

    @app.get("/v1/models")
    async def list_models(request: Request) -> dict[str, Any]:
        guard(request)
        return {"object": "list", "data": model_entries()}

    @app.get("/v1/models/{model_id:path}")
    async def retrieve_model(request: Request, model_id: str) -> dict[str, Any]:
        """OpenAI's ``models.retrieve``: one entry by name or alias, else 404 ``model_not_found``."""
        guard(request)
        entries = model_entries()
        for entry in entries:
            if entry["id"] == model_id:
                return entry
        names = ", ".join(e["id"] for e in entries)
        raise ApiError(404, f"model {model_id!r} not found; available: {names}", param="model", code="model_not_found")

    def model_entries() -> list[dict[str, Any]]:
        data = []
        for model in config.models:
            replicas = supervisor.for_model(model.name)
            state = _model_state(replicas)
            for name in (model.name, *model.aliases):
                entry: dict[str, Any] = {
                    "id": name,
                    "object": "model",
                    "created": created,
                    "owned_by": "orchestrator",
                    "state": state,
                    "replicas": [{"name": i.name, "state": i.state.value} for i in replicas],
                }
                entry["aliases" if name == model.name else "alias_of"] = (
                    list(model.aliases) if name == model.name else model.name
                )
                data.append(entry)
        return data

    # HEAD too: uptime checkers and load balancers probe with it
    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health(request: Request) -> JSONResponse:
        guard(request, config.server.auth_health)
        models = {}
        for model in config.models:
            replicas = supervisor.for_model(model.name)
            models[model.name] = {
                "ready": any(i.state in SERVING for i in replicas),
                "state": _model_state(replicas),
                "replicas": {i.name: i.state.value for i in replicas},
            }
        ok = all(m["ready"] for m in models.values()) and not app.state.draining
        status = "ok" if ok else ("draining" if app.state.draining else "unavailable")
        headers = None if ok else {"Retry-After": str(int(RETRY_AFTER))}
        return JSONResponse({"status": status, "models": models}, status_code=200 if ok else 503, headers=headers)

    @app.get("/status")
    async def status(request: Request) -> JSONResponse:
        guard(request)
        return JSONResponse(supervisor.snapshot())

    @app.get("/metrics")
    async def prometheus(request: Request) -> Response:
        guard(request, config.server.auth_metrics)
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    return app


def _model_state(replicas: list[Any]) -> str:
    """One word for a model: ``ready`` if any replica is, else the most hopeful replica state."""
    order = ("ready", "degraded", "loading", "restarting", "failed", "stopped")
    states = {i.state.value for i in replicas}
    return next((s for s in order if s in states), "stopped")


def _add_error_handlers(app: FastAPI) -> None:
    """Render every error in the OpenAI shape (one place)."""

    def render(err: ApiError) -> JSONResponse:
        headers = err.headers()
        if err.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        return JSONResponse(err.body(), status_code=err.status, headers=headers)

    async def api_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return render(exc)

    async def http_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        # statuses errors.STATUS_TYPES does not name are still the client's fault below 500
        type_ = None if exc.status_code in STATUS_TYPES or exc.status_code >= 500 else "invalid_request_error"
        response = render(ApiError(exc.status_code, str(exc.detail), code=code, type_=type_))
        for name, value in (exc.headers or {}).items():
            response.headers[name] = value
        return response

    async def validation_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {}
        param = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        return render(ApiError(400, str(first.get("msg", "invalid request")), param=param))

    async def unexpected(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error in the proxy", exc_info=exc)
        return render(
            ApiError(500, f"internal error ({type(exc).__name__}); see the orchestrator log", code="internal_error")
        )

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(Exception, unexpected)
