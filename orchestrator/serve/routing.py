"""Which llama-server gets a request: model name or alias -> model -> replica.

- The ``model`` field names a model or one of its aliases (models.yaml). Without ``model``,
  the only configured model is used; with several models that is a 400.
- An unknown name is a 404 ``model_not_found`` whose message lists the names that exist.
- Among the model's replicas, the one serving with the fewest requests in flight wins
  (``Supervisor.pick``). A replica that is loading, restarting or failed never gets a request
  (readiness is llama-server's ``/health``, which the supervisor follows).
- With no replica serving, ``server.when_loading: hold`` (default) waits up to
  ``server.timeouts.queue`` seconds for one (``Supervisor.wait_for_replica``); ``reject``
  answers 503 at once. Either way the 503 carries ``Retry-After``, but only while a replica can
  still recover (loading, restarting): for a model whose replicas all failed or stopped a
  retry cannot help, so that 503 has none.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Any

from orchestrator.errors import ApiError
from orchestrator.supervise.states import SERVING

if TYPE_CHECKING:
    from orchestrator.config.schema import Config, ModelConfig
    from orchestrator.supervise.supervisor import Instance, Supervisor

# Seconds a client is told to wait before retrying while no replica serves. A model load takes
# seconds to minutes; a short hint keeps clients polling without hammering.
RETRY_AFTER = 5.0
# Seconds to wait for the supervisor to notice that a replica whose port refused a connection
# died (it reaps the child within a loop turn; this only bounds the wait).
REFUSED_WAIT = 1.0


class Router:
    """Resolves model names and picks replicas.

    Args:
        config: the validated models.yaml (``models``, ``server.when_loading``,
            ``server.timeouts.queue``).
        supervisor: owns the instances and their states.
    """

    def __init__(self, config: Config, supervisor: Supervisor) -> None:
        self.config = config
        self.supervisor = supervisor
        self.models: dict[str, ModelConfig] = {}
        for model in config.models:
            self.models[model.name] = model
            for alias in model.aliases:
                self.models[alias] = model
        self._only = config.models[0] if len(config.models) == 1 else None

    def names(self) -> list[str]:
        """Every name a client may send: model names and aliases, in config order."""
        return list(self.models)

    def resolve(self, name: Any) -> ModelConfig:
        """Return the model a request's ``model`` field names.

        Args:
            name: the ``model`` value from the request body (``None`` when absent).

        Raises:
            ApiError: 400 when ``model`` is absent or empty and several models are configured,
                or is not a string; 404 ``model_not_found`` (listing the known names) when
                nothing is called ``name``.
        """
        if name is None or name == "":
            if self._only is not None:
                return self._only
            raise ApiError(
                400,
                f"'model' is required: this endpoint serves {', '.join(self.names())}",
                param="model",
                code="model_required",
            )
        if not isinstance(name, str):
            raise ApiError(400, "'model' must be a string", param="model")
        model = self.models.get(name)
        if model is None:
            raise ApiError(
                404,
                f"model {name!r} does not exist; available: {', '.join(self.names())}",
                param="model",
                code="model_not_found",
            )
        return model

    async def left_serving(self, failed: Instance) -> bool:
        """Whether ``failed``, which answered nothing, left the serving states within ``REFUSED_WAIT`` s.

        True means it died (the supervisor reaps a dead child within a loop turn) and the request
        may go to the next serving replica; False means it is alive and closed the connection on
        purpose, so the request is not resent.
        """
        deadline = time.monotonic() + REFUSED_WAIT
        while failed.state in SERVING and (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.supervisor.changed.wait(), timeout=left)
        return failed.state not in SERVING

    async def acquire(self, model: str) -> Instance:
        """Return a serving replica of ``model`` (by name), holding the caller if none serves yet.

        Args:
            model: a configured model name (not an alias; see :meth:`resolve`).

        Returns:
            The replica with the fewest requests in flight. The caller increments its
            ``in_flight`` around the upstream request.

        Raises:
            ApiError: 503 ``model_loading`` with ``Retry-After`` when no replica serves and
                ``when_loading`` is ``reject``, or none became ready within ``timeouts.queue``
                seconds; 503 ``model_unavailable`` without ``Retry-After`` when no replica can
                recover (all failed or stopped).
        """
        instance = self.supervisor.pick(model)
        if instance is not None:
            return instance
        server = self.config.server
        if server.when_loading == "hold":
            instance = await self.supervisor.wait_for_replica(model, server.timeouts.queue)
            if instance is not None:
                return instance
        states = sorted({i.state.value for i in self.supervisor.for_model(model)})
        if states and all(s in ("failed", "stopped") for s in states):
            raise ApiError(
                503,
                f"model {model!r} is not running (replicas: {', '.join(states)}); see `orchestrator status`",
                code="model_unavailable",  # no Retry-After: retrying cannot help until a person acts
            )
        waited = f" after waiting {server.timeouts.queue:g} s" if server.when_loading == "hold" else ""
        raise ApiError(
            503,
            f"model {model!r} is not ready yet{waited} (replicas: {', '.join(states) or 'none'}); retry later",
            code="model_loading",
            retry_after=RETRY_AFTER,
        )
