"""``POST /models/restart``: restart a model's llama-server replicas, one at a time.

Body ``{"model": NAME}`` (a model name or alias). Answers 202 at once with the replicas being
restarted; the restart runs in the background and ``GET /v1/models`` / ``GET /status`` show it
(``loading`` -> ``ready``). Each replica is drained first (no new request is routed to it once
another replica serves; it waits for its requests in flight up to
``server.timeouts.shutdown_grace`` seconds), stopped (SIGTERM, SIGKILL after the supervisor's
``stop_grace``) and started again; with several replicas the next one starts only when the
previous serves again (or failed), so a model with two replicas keeps answering throughout.

A second restart of a model whose restart is still running answers 409. The body must be JSON
(``Content-Type: application/json``, else 415), so a cross-site form cannot trigger it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from orchestrator.errors import ApiError
from orchestrator.supervise.supervisor import SERVING, TERMINAL

if TYPE_CHECKING:
    from orchestrator.config.schema import Config
    from orchestrator.serve.auth import ApiKeys
    from orchestrator.serve.routing import Router
    from orchestrator.supervise.supervisor import Instance, Supervisor


async def read_model_name(request: Request) -> Any:
    """The ``model`` field of a JSON control request body.

    Raises:
        ApiError: 415 unless the content type is JSON; 400 for a body that is not a JSON object.
    """
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise ApiError(
            415,
            "send the body as JSON with 'Content-Type: application/json'",
            code="unsupported_media_type",
            type_="invalid_request_error",
        )
    try:
        body = json.loads(await request.body())
    except ValueError as err:
        raise ApiError(400, f"the body is not valid JSON: {err}") from None
    if not isinstance(body, dict):
        raise ApiError(400, 'the body must be a JSON object: {"model": NAME}')
    return body.get("model")


class Restarts:
    """Background restarts, one task per model at most.

    Args:
        config: ``server.timeouts`` (drain and load bounds).
        supervisor: the instances.
    """

    def __init__(self, config: Config, supervisor: Supervisor) -> None:
        self._drain = float(config.server.timeouts.shutdown_grace)
        self._load = float(config.server.timeouts.load)
        self._supervisor = supervisor
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
        task = asyncio.get_running_loop().create_task(self._restart(replicas), name=f"restart {model}")
        self._tasks[model] = task
        return replicas

    async def _restart(self, replicas: list[Instance]) -> None:
        for inst in replicas:
            await self._drain_one(inst)
            await inst.stop(inst.policy.stop_grace)
            inst.start()
            if len(replicas) > 1:
                await self._until(lambda i=inst: i.state in SERVING or i.state in TERMINAL, self._load)

    async def _drain_one(self, inst: Instance) -> None:
        # requests are routed to this replica only while it is the least busy serving one, so
        # with a sibling serving it receives nothing new; either way its own requests finish
        await self._until(lambda: inst.in_flight == 0, self._drain)

    async def _until(self, done: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._supervisor.changed.wait(), timeout=0.1)

    async def aclose(self) -> None:
        """Cancel restarts still running (app shutdown)."""
        for task in self._tasks.values():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def add_restart_route(app: FastAPI, config: Config, supervisor: Supervisor, router: Router, keys: ApiKeys) -> Restarts:
    """Add ``POST /models/restart`` to ``app``; returns the ``Restarts`` to close at shutdown."""
    restarts = Restarts(config, supervisor)

    @app.post("/models/restart", include_in_schema=False)
    async def restart(request: Request) -> JSONResponse:
        keys.check(request.scope["headers"])
        model = router.resolve(await read_model_name(request))
        replicas = restarts.begin(model.name)
        return JSONResponse(
            {"model": model.name, "status": "restarting", "replicas": [i.name for i in replicas]}, status_code=202
        )

    return restarts
