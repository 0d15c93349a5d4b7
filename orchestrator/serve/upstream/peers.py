"""Peers: other OpenAI-compatible endpoints (models.yaml ``peers:``) that serve models for us.

Where a request goes (``PeerRouter.choose``), after its body was repaired exactly as for a local
model (``orchestrator.serve.pipeline``):

- a **peer-only** model (listed by a peer, or found in its ``/v1/models``, and not in ``models:``)
  goes to the first healthy peer serving it;
- a local model with ``spillover: {peer, max_local, when_down}`` goes to that peer when
  ``max_local`` requests of it already wait or run here, or (``when_down``) while no local replica
  serves; otherwise it stays local;
- a local model whose every replica waits for a lost RPC worker (*degraded*) and that has no
  spillover gets a 503 ``model_degraded`` with the reason at once, never a wait.

Each peer is checked every ``health.interval`` seconds with ``GET <url>/v1/models`` (which also
discovers its models when ``models`` is not given). A peer that failed its last check is not
chosen; a request that finds it dead anyway gets the transport error in the API's shape (503
``peer_unavailable``, 504 on a timeout, 502 on a broken answer) within the peer's timeouts. The
API key comes from the environment variable ``api_key_env`` and is only ever put in the
``Authorization`` header: status rows say whether it is set, never what it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from orchestrator.config.schema import ModelConfig
from orchestrator.errors import ApiError
from orchestrator.serve.upstream.client import RequestHook, Upstream, UpstreamPool
from orchestrator.serve.upstream.errors import TransportFailure
from orchestrator.supervise.states import SERVING

if TYPE_CHECKING:
    from orchestrator.config.running import RunningConfig
    from orchestrator.config.scaleout import PeerConfig
    from orchestrator.config.schema import Config
    from orchestrator.serve.routing import Router
    from orchestrator.supervise.supervisor import Supervisor

RETRY_AFTER = 5.0
LOCAL = "local"
# ApiError codes of transport failures and upstream 5xx (serve/upstream/client.py), said about the peer.
TRANSPORT_CODES = frozenset({"upstream_timeout", "upstream_unavailable", "upstream_disconnected", "upstream_error"})


class Peer:
    """One peer: its HTTP client, health and counters. Quacks like an ``Instance`` where the
    forwarder needs one (``name``, ``base_url``, ``in_flight``, ``record_timings``)."""

    def __init__(self, cfg: PeerConfig) -> None:
        self.cfg = cfg
        self.name = f"peer:{cfg.name}"
        self.base_url = cfg.url.rstrip("/")
        self.upstream: Upstream | None = None  # made by connect()
        self.models: set[str] = set(cfg.models or [])
        self.healthy: bool | None = None  # None until the first check
        self.last_error: str | None = None
        self.checked_at: float | None = None
        self.in_flight = 0
        self.requests = 0
        self.stalls = 0  # as Instance.stalls: a peer is never killed for stalling by us
        self.warnings: list[str] = []

    def connect(self, hooks: list[RequestHook]) -> Upstream:
        """Make the peer's HTTP client: its timeouts, its key, the app's hooks (a test's recording tap)."""
        t, key = self.cfg.timeouts, self._key()
        auth = {"authorization": f"Bearer {key}"} if key else {}  # the one place the key goes
        self.upstream = Upstream(
            self.base_url,
            connect=t.connect,
            first_byte=t.first_byte,
            idle=t.idle,
            headers=auth,
            hooks=hooks,
        )
        return self.upstream

    def child_key(self) -> str | None:
        """None: a peer is no child of ours (its own key is in its upstream's headers)."""
        return None

    def _key(self) -> str | None:
        env = self.cfg.api_key_env
        return os.environ.get(env) or None if env else None

    def record_timings(self, timings: dict[str, Any]) -> None:
        """The forwarder reports llama-server timings; a peer's do not feed any local watch."""

    async def check(self) -> None:
        """``GET /v1/models`` within ``health.timeout`` seconds: healthy or not, and its models when discovered."""
        self.checked_at = time.time()
        try:
            assert self.upstream is not None, "connect() first"
            status, listing = await self.upstream.get_json("/v1/models", self.cfg.health.timeout)
            if status != 200:
                raise ValueError(f"/v1/models answered HTTP {status}")
            ids = {m["id"] for m in listing.get("data", []) if isinstance(m, dict) and isinstance(m.get("id"), str)}
        except TimeoutError:
            self.healthy, self.last_error = False, f"no answer to GET /v1/models within {self.cfg.health.timeout:g} s"
            return
        except (TransportFailure, ValueError, AttributeError, TypeError) as err:
            self.healthy, self.last_error = False, f"{type(err).__name__}: {err}".strip(": ")
            return
        if self.cfg.models is None:
            self.models = ids
        self.healthy, self.last_error = True, None

    def snapshot(self) -> dict[str, Any]:
        """One row for ``/peers``, ``orchestrator status`` and the console (no secret in it)."""
        env = self.cfg.api_key_env
        return {
            "name": self.cfg.name,
            "url": self.base_url,
            "models": sorted(self.models),
            "discovered": self.cfg.models is None,
            "healthy": self.healthy,
            "last_error": self.last_error,
            "checked_at": self.checked_at,
            "in_flight": self.in_flight,
            "requests": self.requests,
            "api_key": None if env is None else (f"${env} (set)" if self._key() else f"${env} (NOT SET)"),
        }

    def unavailable(self, why: str) -> ApiError:
        """The 503 a client gets when this peer cannot take its request."""
        return ApiError(
            503,
            f"peer {self.cfg.name} ({self.base_url}) is unavailable: {why}",
            code="peer_unavailable",
            retry_after=RETRY_AFTER,
        )

    def transport_error(self, err: ApiError) -> ApiError:
        """``err`` told about this peer when it is a transport failure (``upstream.to_api_error``)
        or the peer's 5xx; any other error (the peer's 4xx, our own) unchanged."""
        if err.code not in TRANSPORT_CODES:
            return err
        message = err.message.replace("llama-server", f"peer {self.cfg.name} ({self.base_url})")
        code = "peer_unavailable" if err.code == "upstream_unavailable" else err.code
        return ApiError(err.status, message, code=code, retry_after=err.retry_after)


class PeerRouter:
    """All peers of one app, the spillover rule, and where requests went.

    Args:
        running: the running config: ``peers:`` (as started: a change needs a restart) and the
            local model names and aliases (each snapshot's).
        supervisor: the local replicas' states (is the model down, degraded?).
        registry: the app's Prometheus registry (``orchestrator_routed_requests``, ``orchestrator_peer_up``).
        pool: the app's upstream clients; each peer's (its timeouts, its key) is added to it on ``start``.
    """

    def __init__(
        self, running: RunningConfig, supervisor: Supervisor, registry: CollectorRegistry, pool: UpstreamPool
    ) -> None:
        self.supervisor = supervisor
        self.peers = {p.name: Peer(p) for p in running.current.peers}
        self._pool = pool
        self._local = running.derive(_local_names)
        self.pending: dict[str, int] = {}  # requests of a model waiting or running locally now
        self.routed: dict[tuple[str, str], int] = {}  # (model, target) -> requests
        self._counter = Counter(
            "orchestrator_routed_requests",
            "Requests by model and where they went (local, peer:NAME)",
            ["model", "target"],
            registry=registry,
        )
        self._up = Gauge(
            "orchestrator_peer_up", "1 when the peer passed its last health check", ["peer"], registry=registry
        )
        self._task: asyncio.Task[None] | None = None

    @property
    def local_names(self) -> set[str]:
        """The names and aliases of the local models, in the current snapshot."""
        return self._local()

    def start(self) -> None:
        """Make each peer's HTTP client (the app's hooks are in place by now) and start the
        background health checks (one task; the first round at once)."""
        for peer in self.peers.values():
            if peer.upstream is None:  # the forwarder finds it in the pool by name; the pool closes it
                self._pool.add(peer.name, peer.connect(self._pool.hooks))
        if self.peers and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._health_loop(), name="peer health")

    async def aclose(self) -> None:
        """Stop the checks (the pool closes the peers' connections)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _health_loop(self) -> None:
        due = dict.fromkeys(self.peers, 0.0)
        while True:
            now = time.monotonic()
            ready = [p for name, p in self.peers.items() if due[name] <= now]
            await asyncio.gather(*(p.check() for p in ready))
            for peer in ready:
                due[peer.cfg.name] = time.monotonic() + peer.cfg.health.interval
                self._up.labels(peer.cfg.name).set(1 if peer.healthy else 0)
            await asyncio.sleep(max(0.05, min(due.values()) - time.monotonic()))

    def resolve(self, router: Router, name: Any) -> ModelConfig:
        """The model ``name`` names: local (``Router.resolve``), else a stand-in for one only a peer serves.

        Raises:
            ApiError: as ``Router.resolve`` (400, 404 ``model_not_found``).
        """
        try:
            return router.resolve(name)
        except ApiError as err:
            found = self.peer_model(name) if err.status == 404 else None
            if found is None:
                raise
            return found

    @contextlib.contextmanager
    def route(self, model: ModelConfig) -> Iterator[Peer | None]:
        """Decide where one request goes (``choose``), account it, and yield the peer or None (local).

        A local request counts toward the spillover threshold while the block runs; errors from
        a peer's exchange leave the block said about that peer (``Peer.transport_error``).
        """
        peer = self.choose(model)
        if peer is None:
            self.went(model.name, LOCAL)
            with self.local(model.name):
                yield None
            return
        self.went(model.name, peer.name)
        peer.requests += 1
        peer.in_flight += 1
        try:
            yield peer
        except ApiError as err:
            raise peer.transport_error(err) from None
        finally:
            peer.in_flight -= 1

    def peer_model(self, name: Any) -> ModelConfig | None:
        """A stand-in model config for ``name`` when only a peer serves it (the request repair
        then runs with the default policy), else None."""
        if not isinstance(name, str) or name in self.local_names:
            return None
        if any(name in p.models for p in self.peers.values()):
            return ModelConfig.model_construct(name=name, path="peer", aliases=[])
        return None

    def peer_names(self) -> list[str]:
        """Every model id some peer serves and no local model does."""
        return sorted({m for p in self.peers.values() for m in p.models} - self.local_names)

    def choose(self, model: ModelConfig) -> Peer | None:
        """The peer for this request, or None to serve it locally.

        Raises:
            ApiError: 503 ``peer_unavailable`` for a peer-only model whose peers all failed their
                last check; 503 ``model_degraded`` (with the reason, ``Retry-After``) for a local
                model waiting for a lost RPC worker with no spillover to take it.
        """
        if model.name not in self.local_names:
            serving = [p for p in self.peers.values() if model.name in p.models]
            alive = [p for p in serving if p.healthy is not False]
            if not alive:
                raise serving[0].unavailable(serving[0].last_error or "it failed its health check")
            return min(alive, key=lambda p: p.in_flight)
        down = self.local_down(model.name)
        spill = model.spillover
        peer = self.peers.get(spill.peer) if spill is not None else None
        if spill is not None and peer is not None and peer.healthy is not False:
            busy = self.pending.get(model.name, 0) >= spill.max_local
            if busy or (down is not None and spill.when_down):
                return peer
        if down is not None and down.startswith("degraded"):
            raise ApiError(503, f"model {model.name!r} is {down}", code="model_degraded", retry_after=RETRY_AFTER)
        return None

    def local_down(self, model: str) -> str | None:
        """Why no local replica of ``model`` serves (``"degraded: <worker reason>"`` when every
        replica waits for an RPC worker), or None while one serves."""
        replicas = self.supervisor.for_model(model)
        if any(i.state in SERVING for i in replicas):
            return None
        reasons = [i.workers.degraded for i in replicas if i.workers is not None and i.workers.degraded]
        if replicas and len(reasons) == len(replicas):
            return f"degraded: {reasons[0]}"
        return "not serving (" + ", ".join(sorted({i.state.value for i in replicas})) + ")"

    @contextlib.contextmanager
    def local(self, model: str) -> Iterator[None]:
        """Count one request of ``model`` waiting or running locally (the spillover threshold)."""
        self.pending[model] = self.pending.get(model, 0) + 1
        try:
            yield
        finally:
            self.pending[model] -= 1

    def went(self, model: str, target: str) -> None:
        """Account where one request went (``local`` or ``peer:NAME``)."""
        self.routed[(model, target)] = self.routed.get((model, target), 0) + 1
        self._counter.labels(model, target).inc()

    def snapshot(self) -> dict[str, Any]:
        """``{"peers": [rows], "local_pending": {model: requests waiting or running here},
        "routed": [{model, target, requests}]}`` for ``/peers`` and the console."""
        return {
            "peers": [p.snapshot() for p in self.peers.values()],
            "local_pending": {m: n for m, n in self.pending.items() if n},
            "routed": [{"model": m, "target": t, "requests": n} for (m, t), n in sorted(self.routed.items())],
        }

    def model_entries(self, created: int) -> list[dict[str, Any]]:
        """``/v1/models`` entries of the models only peers serve (``owned_by: peer:NAME``)."""
        entries = []
        for name in self.peer_names():
            owners = [p for p in self.peers.values() if name in p.models]
            entries.append(
                {
                    "id": name,
                    "object": "model",
                    "created": created,
                    "owned_by": owners[0].name,
                    "type": "model",
                    "display_name": name,
                    "state": "ready" if any(p.healthy for p in owners) else "unavailable",
                    "peers": [p.cfg.name for p in owners],
                }
            )
        return entries


def _local_names(config: Config) -> set[str]:
    return {n for m in config.models for n in (m.name, *m.aliases)}
