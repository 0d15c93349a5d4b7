"""What the POST routes read from the running config per request, derived once per snapshot:
body limits (size, time, what it may hold), the stream keepalive interval and each model's request
repair policy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.serve.cache.prefix import policy_for
from orchestrator.serve.http import shapes as body_shapes
from orchestrator.serve.http.body import limits_of
from orchestrator.serve.repair import chat

if TYPE_CHECKING:
    from orchestrator.config.schema import Config


@dataclass(frozen=True)
class RequestSettings:
    """``max_body`` (bytes, ``server.max_body_bytes``), ``body_timeout`` and ``keepalive`` (s,
    ``server.timeouts``), ``limits`` (``server.request_limits``), ``policies`` (model name -> its
    repair policy)."""

    max_body: int
    body_timeout: float
    keepalive: float
    limits: body_shapes.Limits
    policies: dict[str, chat.RepairPolicy]

    @classmethod
    def of(cls, config: Config) -> RequestSettings:
        """The settings of one snapshot."""
        server = config.server
        return cls(
            max_body=server.max_body_bytes,
            body_timeout=server.timeouts.client_body,
            keepalive=server.timeouts.keepalive,
            limits=limits_of(server),
            policies={m.name: policy_for(m) for m in config.models},
        )

    def policy(self, model: str) -> chat.RepairPolicy:
        """Model ``model``'s repair policy (the defaults for a model only a peer serves)."""
        return self.policies.get(model) or chat.RepairPolicy()
