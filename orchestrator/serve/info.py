"""The read-only routes of the endpoint: ``GET /v1/models`` (and ``/v1/models/{id}``),
``/health`` (and ``HEAD``), ``/status`` and ``/metrics``. Each asks the API key unless
``server.auth_health`` / ``server.auth_metrics`` exempt the last two.

The model list serves the OpenAI and the Anthropic SDKs alike: each entry has both APIs' fields
(``object``/``created``/``owned_by`` and ``type``/``display_name``/``created_at``), and the list
Anthropic's paging fields (``has_more``, ``first_id``, ``last_id``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from orchestrator.errors import ApiError
from orchestrator.serve.auth import ApiKeys
from orchestrator.serve.metrics import CONTENT_TYPE, ProxyMetrics
from orchestrator.serve.routing import RETRY_AFTER
from orchestrator.supervise.restart_policy import can_recover
from orchestrator.supervise.supervisor import SERVING

if TYPE_CHECKING:
    from orchestrator.config.schema import Config
    from orchestrator.serve.peers import PeerRouter
    from orchestrator.supervise.supervisor import Supervisor


def add_info_routes(app: FastAPI, config: Config, supervisor: Supervisor, keys: ApiKeys, metrics: ProxyMetrics) -> None:
    """Register the read-only routes on ``app`` (``app.state.draining`` turns ``/health`` to 503)."""
    created = int(time.time())
    peer_router: PeerRouter = app.state.peers

    def guard(request: Request, required: bool = True) -> None:
        if required:
            keys.check(request.scope["headers"])

    @app.get("/v1/models")
    async def list_models(request: Request) -> dict[str, Any]:
        guard(request)
        data = model_entries(config, supervisor, created) + peer_router.model_entries(created)
        last = data[-1]["id"] if data else None
        return {
            "object": "list",
            "data": data,
            "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": last,
        }

    @app.get("/v1/models/{model_id:path}")
    async def retrieve_model(request: Request, model_id: str) -> dict[str, Any]:
        """OpenAI's ``models.retrieve``: one entry by name or alias, else 404 ``model_not_found``."""
        guard(request)
        entries = model_entries(config, supervisor, created) + peer_router.model_entries(created)
        for entry in entries:
            if entry["id"] == model_id:
                return entry
        names = ", ".join(e["id"] for e in entries)
        raise ApiError(404, f"model {model_id!r} not found; available: {names}", param="model", code="model_not_found")

    # HEAD too: uptime checkers and load balancers probe with it
    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health(request: Request) -> JSONResponse:
        guard(request, config.server.auth_health)
        return health_response(config, supervisor, draining=bool(app.state.draining))

    @app.get("/status")
    async def status(request: Request) -> JSONResponse:
        guard(request)
        return JSONResponse(supervisor.snapshot())

    @app.get("/peers")
    async def peers(request: Request) -> JSONResponse:
        guard(request)
        return JSONResponse(peer_router.snapshot())

    @app.get("/metrics")
    async def prometheus(request: Request) -> Response:
        guard(request, config.server.auth_metrics)
        return Response(metrics.render(), media_type=CONTENT_TYPE)


def model_entries(config: Config, supervisor: Supervisor, created: int) -> list[dict[str, Any]]:
    """The ``/v1/models`` list: one entry per model name and per alias, with state and replicas.

    ``created`` is the Unix time (seconds) the app was built, OpenAI's ``created`` field.
    """
    data = []
    created_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created))
    for model in config.models:
        replicas = supervisor.for_model(model.name)
        state = model_state(replicas)
        for name in (model.name, *model.aliases):
            entry: dict[str, Any] = {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "orchestrator",
                "type": "model",
                "display_name": name,
                "created_at": created_at,
                "state": state,
                "replicas": [{"name": i.name, "state": i.state.value} for i in replicas],
            }
            entry["aliases" if name == model.name else "alias_of"] = (
                list(model.aliases) if name == model.name else model.name
            )
            data.append(entry)
    return data


def health_response(config: Config, supervisor: Supervisor, *, draining: bool) -> JSONResponse:
    """200 ``ok`` when every model has a serving replica that answers and the app is not draining,
    else 503 (``draining`` or ``unavailable``); per-model details either way.

    A replica whose llama-server stopped answering (``Instance.responsive``) does not count as
    ready: it cannot answer a request. The 503 carries ``Retry-After`` only while every model
    that is not ready can recover by itself (loading, restarting, a stall being restarted); for
    a failed or stopped model a retry cannot help.
    """
    models = {}
    for model in config.models:
        replicas = supervisor.for_model(model.name)
        models[model.name] = {
            "ready": any(i.state in SERVING and i.responsive for i in replicas),
            "state": model_state(replicas),
            "replicas": {i.name: i.state.value for i in replicas},
            "unresponsive": [i.name for i in replicas if i.state in SERVING and not i.responsive],
        }
    ok = all(m["ready"] for m in models.values()) and not draining
    status = "ok" if ok else ("draining" if draining else "unavailable")
    recoverable = all(m["ready"] or can_recover(str(m["state"])) for m in models.values())
    headers = None if ok or not recoverable else {"Retry-After": str(int(RETRY_AFTER))}
    return JSONResponse({"status": status, "models": models}, status_code=200 if ok else 503, headers=headers)


def model_state(replicas: list[Any]) -> str:
    """One word for a model: ``ready`` if any replica is, else the most hopeful replica state."""
    order = ("ready", "degraded", "loading", "restarting", "failed", "stopped")
    states = {i.state.value for i in replicas}
    return next((s for s in order if s in states), "stopped")
