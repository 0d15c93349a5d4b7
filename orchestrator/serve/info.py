"""The read-only routes of the endpoint: ``GET /v1/models`` (and ``/v1/models/{id}``),
``/health`` (and ``HEAD``), ``/status`` and ``/metrics``. Each asks the API key unless
``server.auth_health`` / ``server.auth_metrics`` exempt the last two.

The model list serves the OpenAI and the Anthropic SDKs alike: each entry has both APIs' fields
(``object``/``created``/``owned_by`` and ``type``/``display_name``/``created_at``), and the list
Anthropic's paging fields (``has_more``, ``first_id``, ``last_id``); a request from Codex also gets
Codex's catalog (``models``, ``orchestrator.connect.catalog``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from orchestrator.connect.catalog import codex_entry
from orchestrator.errors import ApiError
from orchestrator.host import disk
from orchestrator.serve.metrics import CONTENT_TYPE, ProxyMetrics
from orchestrator.serve.routing import RETRY_AFTER, shown
from orchestrator.supervise.supervisor import SERVING

if TYPE_CHECKING:
    from orchestrator.config.running import RunningConfig
    from orchestrator.config.schema import Config, ModelConfig
    from orchestrator.serve.cache.prompt_cache import PromptCache
    from orchestrator.serve.drafting.tuner import DraftTuner
    from orchestrator.serve.upstream.peers import PeerRouter
    from orchestrator.supervise.scheduler import ModelScheduler
    from orchestrator.supervise.supervisor import Supervisor


@dataclass(frozen=True)
class InfoViews:
    """What the read-only routes and the console show besides the supervisor's table: the peers,
    the prompt cache, the draft-length policy's choices, and whether the app is draining."""

    peers: PeerRouter
    prompt_cache: PromptCache | None
    tuner: DraftTuner
    draining: Callable[[], bool]

    def status(self, supervisor: Supervisor, scheduler: ModelScheduler) -> dict[str, Any]:
        """The ``/status`` body."""
        body = status_body(supervisor, scheduler, self.prompt_cache)
        body["draft_policy"] = self.tuner.status()  # serve.drafting.tuner: K per request, and why
        return body


def add_info_routes(
    app: FastAPI,
    running: RunningConfig,
    supervisor: Supervisor,
    metrics: ProxyMetrics,
    scheduler: ModelScheduler,
    views: InfoViews,
) -> None:
    """Register the read-only routes on ``app`` (``views.draining()`` turns ``/health`` to 503).

    Everything follows ``running``'s current snapshot: a reload's models show in the list on the
    next request. Who may call each route is the route table's (``orchestrator.serve.routes``).
    """
    created = int(time.time())
    peer_router = views.peers

    def entries_now() -> list[dict[str, Any]]:
        local = model_entries(running.current, supervisor, scheduler, created)
        return local + peer_router.model_entries(created)

    _add_model_list(app, running, entries_now)

    # HEAD too: uptime checkers and load balancers probe with it
    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health(request: Request) -> JSONResponse:
        return health_response(supervisor, scheduler, draining=views.draining())

    @app.get("/status")
    async def status(request: Request) -> JSONResponse:
        return JSONResponse(views.status(supervisor, scheduler))

    @app.get("/peers")
    async def peers(request: Request) -> JSONResponse:
        return JSONResponse(peer_router.snapshot())

    @app.get("/metrics")
    async def prometheus(request: Request) -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)


def _add_model_list(
    app: FastAPI,
    running: RunningConfig,
    entries_now: Callable[[], list[dict[str, Any]]],
) -> None:
    """``GET /v1/models`` (OpenAI's and Anthropic's list shape) and ``GET /v1/models/{id}``."""

    @app.get("/v1/models")
    async def list_models(request: Request) -> dict[str, Any]:
        data, more = page(entries_now(), dict(request.query_params))
        body = {
            "object": "list",
            "data": data,
            "has_more": more,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }
        if from_codex(request.headers):  # Codex reads its catalog from the same route
            body["models"] = codex_catalog(running.current)
        return body

    @app.get("/v1/models/{model_id:path}")
    async def retrieve_model(request: Request, model_id: str) -> dict[str, Any]:
        """OpenAI's ``models.retrieve``: one entry by name or alias, else 404 ``model_not_found``."""
        entries = entries_now()
        for entry in entries:
            if entry["id"] == model_id:
                return entry
        names = ", ".join(e["id"] for e in entries)
        raise ApiError(
            404, f"model {shown(model_id)} not found; available: {names}", param="model", code="model_not_found"
        )


def codex_catalog(config: Config) -> list[dict[str, Any]]:
    """Codex's ``models`` array: one entry per served model, its window a slot's
    (``orchestrator.connect.catalog``)."""
    return [
        codex_entry(m.name, m.ctx_size // m.parallel, thinking=m.thinking is not False, images=m.multimodal)
        for m in config.models
    ]


def from_codex(headers: Any) -> bool:
    """Whether a request comes from Codex: its ``originator`` header (``codex_cli_rs``,
    ``codex_exec``, ...) or its user agent."""
    who = headers.get("originator") or headers.get("user-agent") or ""
    return str(who).lower().startswith("codex")


def page(entries: list[dict[str, Any]], query: dict[str, str]) -> tuple[list[dict[str, Any]], bool]:
    """Anthropic's list paging over ``entries`` (gateway model discovery: ``limit``, ``after_id``,
    ``before_id``); ``(the page, has_more)``. Without them, everything.

    Raises:
        ApiError: 400 naming the parameter for a limit that is not a positive integer.
    """
    start, end = 0, len(entries)
    ids = [e["id"] for e in entries]
    if "after_id" in query and query["after_id"] in ids:
        start = ids.index(query["after_id"]) + 1
    if "before_id" in query and query["before_id"] in ids:
        end = ids.index(query["before_id"])
    rows = entries[start:end]
    if "limit" not in query:
        return rows, False
    limit = query["limit"]
    if not (limit.isascii() and limit.isdigit()) or len(limit) > 9 or int(limit) < 1:
        raise ApiError(400, f"limit must be a positive integer below 10**9 (got {shown(limit)})", param="limit")
    if "before_id" in query and "after_id" not in query:  # the page just before before_id
        return rows[-int(limit) :], len(rows) > int(limit)
    return rows[: int(limit)], len(rows) > int(limit)


def model_entries(
    config: Config, supervisor: Supervisor, scheduler: ModelScheduler, created: int
) -> list[dict[str, Any]]:
    """The ``/v1/models`` list: one entry per model name and per alias, with its lifecycle state
    (``unloaded``, ``loading``, ``ready``, ``unloading``, ``failed``; in ``status.value`` as
    llama.cpp's router spells it), memory per device (bytes) and replicas.

    ``created`` is the Unix time (seconds) the app was built, OpenAI's ``created`` field.
    """
    data = []
    created_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created))
    rows = {row["model"]: row for row in scheduler.snapshot()}
    for model in config.models:
        replicas = supervisor.for_model(model.name)
        row = rows.get(model.name, {})
        state = row.get("state", model_state(replicas))
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
                "status": {"value": {"ready": "loaded", "unloading": "loaded"}.get(state, state)},
                "memory": row.get("memory", {}),
                "pinned": model.pinned,
                "replicas": [{"name": i.name, "state": i.state.value} for i in replicas],
                **model_size(model),
            }
            entry["aliases" if name == model.name else "alias_of"] = (
                list(model.aliases) if name == model.name else model.name
            )
            data.append(entry)
    return data


def model_size(model: ModelConfig) -> dict[str, Any]:
    """What an agent sizes its compaction and features by: the context of one request (a slot:
    ``ctx_size / parallel``) under the names clients read (``context_length``: OpenRouter and LM
    Studio, ``max_model_len``: vLLM, ``max_input_tokens``: LiteLLM), and the capabilities."""
    ctx = model.ctx_size // model.parallel
    caps = {"tools": True, "vision": model.multimodal, "thinking": True, "embeddings": embeddings(model)}
    return {"context_length": ctx, "max_model_len": ctx, "max_input_tokens": ctx, "capabilities": caps}


def embeddings(model: ModelConfig) -> bool:
    """Whether the model's llama-server serves embeddings (``--embeddings`` in ``extra_args``)."""
    return "--embeddings" in model.extra_args or "--embedding" in model.extra_args


def status_body(supervisor: Supervisor, scheduler: ModelScheduler, kv: PromptCache | None = None) -> dict[str, Any]:
    """``GET /status``: instances (``Supervisor.snapshot``), models (``ModelScheduler.snapshot``: state,
    memory, idle time, time until unload; with ``kv``, each model's ``kv`` block: persistence on,
    its warning, saved/restored slots, restore seconds, verification failures), device memory,
    swaps, and the last reload's problem."""
    models = scheduler.snapshot()
    for row in models:
        if kv is not None:
            row["kv"] = kv.status(row["model"])
    return {
        "instances": supervisor.snapshot(),
        "models": models,
        "disk": disk.faults(),
        "memory": scheduler.memory(),
        "swaps": scheduler.swaps,
        "config_error": scheduler.config_error,
    }


def health_response(supervisor: Supervisor, scheduler: ModelScheduler, *, draining: bool) -> JSONResponse:
    """200 ``ok`` unless the app is draining, a model failed, a model is still loading at start, or
    a loaded model has no replica that answers; else 503 (``draining`` or ``unavailable``), with
    per-model details either way.

    A model that is unloaded (it loads on its first request) or loading for a request does not
    make the endpoint unhealthy: a load balancer must not drop it during a swap. A replica whose
    llama-server stopped answering (``Instance.responsive``) does not count as ready. The 503
    carries ``Retry-After`` only while no model failed: for a failed model a retry cannot help.
    """
    models = {}
    bad: list[str] = []
    for row in scheduler.snapshot():
        replicas = supervisor.for_model(row["model"])
        ready = any(i.state in SERVING and i.responsive for i in replicas)
        models[row["model"]] = {
            "ready": ready,
            "state": row["state"],
            "replicas": {i.name: i.state.value for i in replicas},
            "unresponsive": [i.name for i in replicas if i.state in SERVING and not i.responsive],
        }
        if row["state"] == "failed" or (row["state"] == "loading" and row["startup"]):
            bad.append(row["state"])
        elif row["state"] == "ready" and not ready:
            bad.append("restarting")
    ok = not bad and not draining
    status = "ok" if ok else ("draining" if draining else "unavailable")
    headers = None if ok or "failed" in bad else {"Retry-After": str(int(RETRY_AFTER))}
    # a file that cannot be written (full or read-only disk) is shown, but the endpoint still serves
    body = {"status": status, "models": models, "disk": disk.faults()}
    return JSONResponse(body, status_code=200 if ok else 503, headers=headers)


def model_state(replicas: list[Any]) -> str:
    """One word for a model: ``ready`` if any replica is, else the most hopeful replica state."""
    order = ("ready", "degraded", "loading", "restarting", "failed", "stopped")
    states = {i.state.value for i in replicas}
    return next((s for s in order if s in states), "stopped")
