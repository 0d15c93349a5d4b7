"""The endpoint as a client sees it: its base URL (the running ``up``'s when there is one, else
models.yaml's ``server`` block), a key, and each model's names and context window per request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.config.schema import Config
from orchestrator.errors import UserError

# a client must dial a real address: a wildcard bind is reached on loopback
_WILDCARD = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}
KEY_ENV = "ORCHESTRATOR_API_KEY"


@dataclass(frozen=True)
class Model:
    """A served model: the id clients send, its aliases, and the context one request gets
    (``ctx_size`` shared by ``parallel`` slots)."""

    name: str
    aliases: tuple[str, ...]
    context: int
    max_output: int | None = None  # the longest answer a client should ask for (None: its share of context)


@dataclass(frozen=True)
class Endpoint:
    """``url`` without ``/v1``; ``key`` the first of ``server.api_keys`` (None: no key needed)."""

    url: str
    key: str | None
    models: tuple[Model, ...]

    def model(self, name: str | None) -> Model:
        """The model ``name`` (a name or an alias), or the first one.

        Raises:
            UserError: no such model.
        """
        if name is None:
            return self.models[0]
        for m in self.models:
            if name == m.name or name in m.aliases:
                return m
        names = ", ".join(m.name for m in self.models)
        raise UserError(f"no model {name!r} in models.yaml", hint=f"pick one of: {names}")


def endpoint_of(config: Config, live: dict[str, Any] | None = None) -> Endpoint:
    """The endpoint of ``config``; ``live`` is the running ``up``'s ``run.json`` (its real port).

    Raises:
        UserError: models.yaml serves no model.
    """
    if not config.models:
        raise UserError("models.yaml serves no model", hint="add one under models:")
    server = config.server
    url = str(live["endpoint"]) if live and live.get("endpoint") else ""
    if not url and server.port == 0:
        raise UserError(
            "server.port is 0: the endpoint's port is picked when `orchestrator up` starts",
            hint="start `orchestrator up` first (connect then reads its address), or set server.port",
        )
    if not url:
        host = _WILDCARD.get(server.host, server.host)
        host = f"[{host}]" if ":" in host and not host.startswith("[") else host
        url = f"http://{host}:{server.port}"
    models = tuple(Model(m.name, tuple(m.aliases), max(1, m.ctx_size // max(1, m.parallel))) for m in config.models)
    return Endpoint(url=url.rstrip("/"), key=server.api_keys[0] if server.api_keys else None, models=models)
