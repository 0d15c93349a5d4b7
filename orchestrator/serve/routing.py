"""Which llama-server gets a request: model name or alias -> model -> replica.

- The ``model`` field names a model or one of its aliases (models.yaml). Without ``model``
  (:meth:`Router.unnamed`): the only configured model; else the model its conversation went to
  (its session key, its opening: ``cache.sessions.ConversationModels``), so a follow-up never
  swaps models; else the only loaded model; else ``server.default_model``; else a 400 that lists
  the models.
- An unknown name is a 404 ``model_not_found`` whose message lists the names that exist.
- Among the model's replicas, the one serving with the fewest requests in flight wins
  (``ManagedModel.pick``). A replica that is loading, restarting or failed never gets a request
  (readiness is llama-server's ``/health``, which the supervisor follows).
- With no replica serving, ``server.when_loading: hold`` (default) holds the request up to
  ``server.timeouts.queue`` seconds while the model loads (``ModelScheduler.acquire``: load on
  demand, eviction, queue limit); ``reject`` answers 503 at once (and starts the load). The 503
  carries ``Retry-After`` only while the model can still come up by itself: for a failed model
  (or one too large for the memory budget) a retry cannot help, so that 503 has none.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from typing import TYPE_CHECKING, Any

from orchestrator.errors import ApiError
from orchestrator.serve.cache.prompt_cache import NO_AFFINITY, Affinity, ChatOf
from orchestrator.serve.cache.sessions import ConversationModels, conversation_keys, session_of, system_text
from orchestrator.supervise.model_rules import RETRY_AFTER as SCHEDULER_RETRY_AFTER
from orchestrator.supervise.model_state import ModelState
from orchestrator.supervise.refusals import ModelRefused, Refusal
from orchestrator.supervise.states import SERVING

if TYPE_CHECKING:
    from orchestrator.config.running import RunningConfig
    from orchestrator.config.schema import Config, ModelConfig
    from orchestrator.serve.cache.prompt_cache import PromptCache
    from orchestrator.supervise.managed import Lease, Prefer
    from orchestrator.supervise.scheduler import ModelScheduler
    from orchestrator.supervise.supervisor import Instance, Supervisor

# Seconds a client is told to wait before retrying while no replica serves. A model load takes
# seconds to minutes; a short hint keeps clients polling without hammering.
RETRY_AFTER = SCHEDULER_RETRY_AFTER
# Seconds to wait for the supervisor to notice that a replica whose port refused a connection
# died (it reaps the child within a loop turn; this only bounds the wait).
REFUSED_WAIT = 1.0


SHOWN_CHARS = 120  # of an unknown model name in an error: a 2 MB name came back whole in the 404


def shown(name: str) -> str:
    """``name`` quoted for an error message, cut to ``SHOWN_CHARS`` characters."""
    return repr(name) if len(name) <= SHOWN_CHARS else repr(name[:SHOWN_CHARS]) + f"... ({len(name)} characters)"


class Router:
    """Resolves model names and picks replicas.

    Args:
        running: the running config (``models``, ``server.when_loading``, ``server.timeouts.queue``);
            names resolve against its current snapshot, so a reload's names apply to the next request.
        supervisor: owns the instances and their states.
    """

    def __init__(self, running: RunningConfig, supervisor: Supervisor, scheduler: ModelScheduler) -> None:
        self.running = running
        self.supervisor = supervisor
        self.scheduler = scheduler
        self.prompt_cache: PromptCache | None = None  # prefix affinity (``orchestrator.serve.cache.prompt_cache``)
        self._names = running.derive(_name_table)
        self.conversations = ConversationModels()  # which model each recent conversation went to

    @property
    def config(self) -> Config:
        """The current snapshot."""
        return self.running.current

    @property
    def models(self) -> dict[str, ModelConfig]:
        """Every name and alias -> its model, in the current snapshot."""
        return self._names()

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
            models = self.config.models
            if len(models) == 1:
                return models[0]
            raise ApiError(
                400,
                f"'model' is required: this endpoint serves {', '.join(self.names())}",
                param="model",
                code="model_required",
            )
        if not isinstance(name, str):
            raise ApiError(400, "'model' must be a string", param="model")
        model = self.models.get(name) or _loosely(self.models, name)
        if model is None:
            raise ApiError(
                404,
                f"model {shown(name)} does not exist; available: {', '.join(self.names())}",
                param="model",
                code="model_not_found",
            )
        return model

    def unnamed(self, body: dict[str, Any], session: str | None) -> ModelConfig:
        """The model of a request without ``model`` (the module docstring's order): ``session``
        is the client's session key (``Adapter.session_key``).

        Raises:
            ApiError: 400 ``model_required``, listing the models, when nothing decides.
        """
        models = self.config.models
        if len(models) == 1:
            return models[0]
        known = self.conversations.model_of(conversation_keys(session, body))
        if known is not None and known in self.models:
            return self.models[known]
        loaded = [m for m in models if (s := self.scheduler.models.get(m.name)) and s.state is ModelState.READY]
        if len(loaded) == 1:
            return loaded[0]
        default = self.config.server.default_model
        if default is not None and default in self.models:
            return self.models[default]
        raise ApiError(
            400,
            f"'model' is required: this endpoint serves {', '.join(self.names())}, and this request's "
            f"conversation is new, {len(loaded)} models are loaded and server.default_model is not set",
            param="model",
            code="model_required",
        )

    def remember(self, body: dict[str, Any], session: str | None, model: ModelConfig) -> None:
        """``model`` serves the conversation of ``body`` (for its follow-ups without ``model``)."""
        if len(self.config.models) > 1:
            self.conversations.remember(conversation_keys(session, body), model.name)

    async def affinity(
        self, chat_of: ChatOf, model: ModelConfig, body: dict[str, Any], key: str | None = None
    ) -> Affinity:
        """Where a request should go by its prompt's prefix (``PromptCache.route``); ``NO_AFFINITY``
        without a prompt cache."""
        return await self.prompt_cache.route(chat_of, model, body, key) if self.prompt_cache else NO_AFFINITY

    def count_session(self, model: str, key: str | None, body: dict[str, Any], timings: dict[str, Any]) -> None:
        """An answer's prompt-cache hits to its session (``PromptCache.sessions``; ``key``: the
        client's session key, else the session is told by the body's opening)."""
        if self.prompt_cache is not None:
            self.prompt_cache.sessions.record(model, session_of(key, body), timings, system_text(body))

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

    async def acquire(self, model: str, prefer: Prefer | None = None) -> Lease:
        """A lease on a serving replica of ``model`` (by name), holding the caller while it loads.

        The model scheduler (``ModelScheduler.acquire``) loads an unloaded model, evicting idle
        ones when memory is short; the caller releases the lease when the request is over.

        Raises:
            ApiError: 429 beyond the model's queue limit; 503 ``model_loading`` with
                ``Retry-After`` (``when_loading: reject``, or not ready within ``timeouts.queue``);
                503 ``model_unavailable`` / ``model_load_failed`` / ``model_too_large`` with the
                reason and no ``Retry-After`` (retrying cannot help until a person acts).
        """
        try:
            return await self.scheduler.acquire(model, prefer)
        except ModelRefused as refused:
            raise refused_to_http(refused) from None


# The lifecycle's refusals as HTTP: a full queue is the client's to slow down, a removed model is
# not there; everything else is the server's state (503), with Retry-After where a retry can help.
_STATUS = {Refusal.QUEUE_FULL: 429, Refusal.REMOVED: 404}


def refused_to_http(refused: ModelRefused) -> ApiError:
    """``refused`` (``orchestrator.supervise.refusals``) as the error a client gets."""
    return ApiError(
        _STATUS.get(refused.refusal, 503),
        refused.message,
        param=refused.param,
        code=refused.refusal.value,
        retry_after=refused.retry_after,
    )


# A bracketed suffix agent launchers add to a model name: Claude Code's "[1m]" (its 1M-context
# variant) reaches the gateway as part of the name.
_SUFFIX = re.compile(r"\[[^\[\]]*\]$")


def _loosely(table: dict[str, ModelConfig], name: str) -> ModelConfig | None:
    """The model ``name`` means when it is not a name or alias as written: without a bracketed
    suffix (``demo[1m]``), and in another case (``Demo``), when exactly one model matches."""
    bare = _SUFFIX.sub("", name).strip()
    for candidate in (name, bare):  # the whole name first: an alias may hold brackets (qwen[q8])
        if candidate != name and candidate in table:
            return table[candidate]
        folded = {m.name: m for key, m in table.items() if key.casefold() == candidate.casefold()}
        if len(folded) == 1:
            return next(iter(folded.values()))
        if folded:
            return None  # several models fold to it: no guess
    return None


def _name_table(config: Config) -> dict[str, ModelConfig]:
    table: dict[str, ModelConfig] = {}
    for model in config.models:
        table[model.name] = model
        for alias in model.aliases:
            table[alias] = model
    return table
