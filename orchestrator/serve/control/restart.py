"""``POST /models/restart``: restart a model's llama-server replicas, one at a time.

Body ``{"model": NAME}`` (a model name or alias). Answers 202 at once with the replicas being
restarted; the restart runs in the background and ``GET /v1/models`` / ``GET /status`` show it
(``loading`` -> ``ready``). Each replica is drained first (no new request is routed to it; it
waits for its requests in flight up to ``server.timeouts.drain`` seconds), stopped (SIGTERM,
SIGKILL after ``stop_grace``) and started again; the next one starts only when the previous
serves again (or failed), so a model with two replicas keeps answering throughout
(``orchestrator.supervise.scheduler.ModelScheduler.restart``). A model that is not loaded has
nothing to restart.

A second restart of a model whose restart is still running answers 409. The body must be JSON
(``Content-Type: application/json``, else 415), so a cross-site form cannot trigger it.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from orchestrator.errors import ApiError
from orchestrator.serve.http.body import Receive, read_json
from orchestrator.serve.http.shapes import Limits

# A control body names a model: a few bytes. Read like every body (size, time, encoding, numbers);
# the model name's type is checked by the route itself (400 model_required names what it wants).


@dataclass(frozen=True)
class ControlBody:
    """The limits a control route's body is read under (``http.body.BodyLimits``)."""

    max_body: int = 64 * 1024
    body_timeout: float = 10.0
    limits: Limits = field(default_factory=Limits)


CONTROL_BODY = ControlBody()

if TYPE_CHECKING:
    from orchestrator.serve.routing import Router
    from orchestrator.supervise.scheduler import ModelScheduler
    from orchestrator.supervise.supervisor import Instance, Supervisor


async def read_model_name(request: Request) -> Any:
    """The ``model`` field of a JSON control request body.

    Raises:
        ApiError: 415 unless the content type is JSON; 400 for a body that is not a JSON object
            (``serve/http/body.py``).
    """
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise ApiError(
            415,
            "send the body as JSON with 'Content-Type: application/json'",
            code="unsupported_media_type",
            type_="invalid_request_error",
        )
    # the proxy's own parser: any text encoding, and nesting, huge numbers or lone surrogates are 400s
    body, _raw = await read_json(request.scope["headers"], cast("Receive", request.receive), CONTROL_BODY, None)
    return body.get("model")


class Restarts:
    """Background restarts, one task per model at most.

    Args:
        supervisor: the instances.
        scheduler: restarts a model's replicas one at a time (``ModelScheduler.restart``).
    """

    def __init__(self, supervisor: Supervisor, scheduler: ModelScheduler) -> None:
        self._supervisor = supervisor
        self._scheduler = scheduler
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def running(self, model: str) -> bool:
        """Whether a restart of ``model`` is under way."""
        task = self._tasks.get(model)
        return task is not None and not task.done()

    def begin(self, model: str) -> list[Instance]:
        """Start restarting ``model``'s replicas in the background; returns them.

        Raises:
            ApiError: 409 while a restart of ``model`` is still running.
        """
        if self.running(model):
            raise ApiError(409, f"model {model!r} is already restarting", param="model", code="restart_in_progress")
        replicas = self._supervisor.for_model(model)
        task = asyncio.get_running_loop().create_task(self._scheduler.restart(model), name=f"restart {model}")
        self._tasks[model] = task
        return replicas

    async def aclose(self) -> None:
        """Cancel restarts still running (app shutdown)."""
        for task in self._tasks.values():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def add_restart_route(app: FastAPI, supervisor: Supervisor, scheduler: ModelScheduler, router: Router) -> Restarts:
    """Add ``POST /models/restart`` to ``app``; returns the ``Restarts`` to close at shutdown."""
    restarts = Restarts(supervisor, scheduler)

    @app.post("/models/restart", include_in_schema=False)
    async def restart(request: Request) -> JSONResponse:
        name = await read_model_name(request)
        if not isinstance(name, str) or not name:  # no default for a restart: {} restarted the only model
            raise ApiError(400, "'model' is required: the model to restart", param="model", code="model_required")
        model = router.resolve(name)
        replicas = restarts.begin(model.name)
        return JSONResponse(
            {"model": model.name, "status": "restarting", "replicas": [i.name for i in replicas]}, status_code=202
        )

    return restarts
