"""What every forwarded request shares: :class:`Forwarder` (the running config's request settings,
router, upstream pool, metrics, keys, peers, the draft-length policy). Each request is one
``orchestrator.serve.pipeline.ProxyRequest`` made by its route's ``Endpoint``
(``orchestrator.serve.pipeline``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orchestrator.serve.drafting.tuner import DraftTuner
from orchestrator.serve.request_settings import RequestSettings
from orchestrator.serve.upstream.template_efforts import TemplateEfforts

if TYPE_CHECKING:
    from orchestrator.config.running import RunningConfig
    from orchestrator.config.schema import Config
    from orchestrator.serve.http.auth import ApiKeys
    from orchestrator.serve.metrics import ProxyMetrics
    from orchestrator.serve.routing import Router
    from orchestrator.serve.upstream.client import UpstreamPool
    from orchestrator.serve.upstream.peers import PeerRouter


class Forwarder:
    """Shared state of the forwarded routes of one app.

    Args:
        running: the running config (body limits, repair policies: read per request).
        router: model resolution and replica choice.
        pool: the upstream HTTP clients.
        metrics: the app's metrics.
        keys: API keys.
        draining: returns True once the app stops taking requests (``Served.draining``).
        peers: the peers, the spillover rule and where requests went (``orchestrator.serve.upstream.peers``).

    Attributes:
        settings: the current snapshot's request settings (``RequestSettings``), derived once per
            snapshot.
        tuner: the draft-length policy of ``speculative.adaptive`` models (``serve.draft_tuner``):
            sets each request's ``speculative.n_max`` (``ProxyRequest.speculation``) and learns
            from its answer's timings.
        efforts: the reasoning-effort levels each replica's chat template accepts, learned once
            (``serve.upstream.template_efforts``).
    """

    def __init__(
        self,
        running: RunningConfig,
        router: Router,
        pool: UpstreamPool,
        metrics: ProxyMetrics,
        keys: ApiKeys,
        draining: Callable[[], bool],
        peers: PeerRouter,
    ) -> None:
        self.router, self.pool, self.metrics, self.keys, self.draining = router, pool, metrics, keys, draining
        self.peers = peers  # peers, spillover, where requests went
        self.running = running
        self.settings = running.derive(RequestSettings.of)  # limits and repair policies, per snapshot
        self.tuner = DraftTuner(running, metrics.registry)  # speculative.adaptive: K per request
        # Responses' stored responses (``serve.responses.stored.ResponseStore``, an API above this
        # layer: the app sets it); None stores nothing
        self.responses_store: Any = None
        self.efforts = TemplateEfforts()  # reasoning_effort levels per replica's template

    @property
    def config(self) -> Config:
        """The running config's current snapshot (a reload applies to the next request)."""
        return self.running.current
