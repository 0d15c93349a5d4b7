"""Model control routes: ``POST /models/load`` and ``POST /models/unload`` with ``{"model": NAME}``.

The names and body are those of llama.cpp's router mode (``tools/server/server-models.cpp``); the
answer carries ``success`` like it does, plus the model's lifecycle row (state, memory, idle time).
``load`` waits until the model is ready (at most ``server.timeouts.queue`` s); ``unload`` drains
the model's requests (new ones are held) and stops it. Bodies must be JSON (415 otherwise, so a
cross-site form cannot send one). Errors use the OpenAI shape: 400 without a model name, 404 for
an unknown one, 503 with the reason when a load fails or cannot fit. ``POST /reload`` re-reads
models.yaml (``orchestrator reload``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from orchestrator.errors import ApiError
from orchestrator.serve.control.restart import read_model_name
from orchestrator.serve.routing import refused_to_http
from orchestrator.supervise.refusals import ModelRefused

if TYPE_CHECKING:
    from orchestrator.serve.reload import ConfigReloader
    from orchestrator.serve.routing import Router
    from orchestrator.supervise.scheduler import ModelScheduler


def add_model_routes(
    app: FastAPI,
    router: Router,
    scheduler: ModelScheduler,
    reloader: Callable[[], ConfigReloader | None] = lambda: None,
) -> None:
    """Register ``POST /models/load``, ``/models/unload`` and ``/reload`` on ``app`` (admin routes in
    ``orchestrator.serve.routes``).

    ``/reload`` runs ``reloader()`` (``orchestrator.serve.reload.ConfigReloader``, set by
    ``orchestrator up``): 200 with what changed, 400 ``config_invalid`` with the located problems
    (the running config stays), 409 ``restart_required``, 501 when nothing can reload.
    """

    def row(name: str) -> dict[str, Any]:
        return next(r for r in scheduler.snapshot() if r["model"] == name)

    async def model_name(request: Request) -> str:
        name = await read_model_name(request)
        if not isinstance(name, str) or not name:
            raise ApiError(
                400, "'model' is required: the model to load or unload", param="model", code="model_required"
            )
        return router.resolve(name).name

    async def act(request: Request, action: Callable[[str], Awaitable[object]]) -> JSONResponse:
        name = await model_name(request)
        try:
            await action(name)
        except ModelRefused as refused:
            raise refused_to_http(refused) from None
        return JSONResponse({"success": True, **row(name)})

    @app.post("/models/load")
    async def load(request: Request) -> JSONResponse:
        return await act(request, scheduler.load)

    @app.post("/models/unload")
    async def unload(request: Request) -> JSONResponse:
        return await act(request, scheduler.unload)

    @app.post("/reload")
    async def reload(request: Request) -> JSONResponse:
        current = reloader()
        if current is None:
            raise ApiError(501, "this server was not started from a models.yaml, so it cannot reload", code="no_reload")
        report = await current.reload("request")
        return JSONResponse({"success": True, "summary": current.summary(report), **vars(report)})
