"""The console's chart data: a short in-memory ring of per-model samples, taken off the hot path.

A background task (:meth:`History.run`) wakes every ``interval`` seconds, reads the totals the
proxy's Prometheus metrics already keep (``orchestrator.serve.metrics``: request counts, TTFT
and decode-speed histogram sums, completion/draft/accepted token counters, in-flight gauge)
through their public ``collect()``, and stores the differences since the last wake-up as one
point. The request path is untouched: nothing here runs per request or per token.

One point per model, every field None when nothing happened in the interval:

===================  ===================================================================
``rps``              requests finished per second (all endpoints and statuses)
``decode_tps``       mean decode speed of the responses finished (tok/s, llama-server's
                     ``timings.predicted_per_second``)
``gen_tps``          tokens generated per second over the interval, all requests together
``acceptance``       accepted / drafted MTP tokens in the interval
``tokens_per_step``  generated / verification steps, ``steps = predicted - accepted``
                     (the definition of ``orchestrator.bench.stats``), only when drafting
``ttft_s``           mean time to first token of the requests finished (seconds)
``in_flight``        requests being forwarded at the sample time
``queued``           requests waiting: held for a model that is loading or swapping in (the
                     lifecycle's waiters, when ``waiting`` is given) plus those in flight beyond
                     the serving replicas' slots (``parallel``)
===================  ===================================================================
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psutil

from orchestrator.supervise.supervisor import SERVING

if TYPE_CHECKING:
    from orchestrator.config.schema import Config
    from orchestrator.serve.metrics import ProxyMetrics
    from orchestrator.supervise.supervisor import Supervisor

INTERVAL = 2.0  # seconds between samples
SIZE = 300  # samples kept: 10 minutes at INTERVAL

# (metric object attribute on ProxyMetrics, sample name suffix, key in the totals)
_SOURCES = (
    ("requests", "_total", "requests"),
    ("ttft", "_sum", "ttft_sum"),
    ("ttft", "_count", "ttft_n"),
    ("decode_tps", "_sum", "tps_sum"),
    ("decode_tps", "_count", "tps_n"),
    ("completion_tokens", "_total", "generated"),
    ("drafted", "_total", "drafted"),
    ("accepted", "_total", "accepted"),
    ("in_flight", "", "in_flight"),
)


@dataclass
class _Totals:
    values: dict[str, dict[str, float]] = field(default_factory=dict)  # model -> key -> total
    at: float = 0.0  # monotonic seconds


class History:
    """Per-model samples for the console's charts, at most ``size`` of them.

    Args:
        supervisor: read for the serving replicas (queue depth), child pids (resident memory) and
            the running config's models (names, ``parallel`` slots).
        metrics: the app's ``ProxyMetrics``; only read.
        interval: seconds between samples.
        size: samples kept (older ones are dropped).

    ``waiting``, when set, returns the requests held per model (name -> count) outside any slot,
    e.g. by the lifecycle while the model loads; read once per sample.
    """

    def __init__(
        self,
        supervisor: Supervisor,
        metrics: ProxyMetrics,
        *,
        interval: float = INTERVAL,
        size: int = SIZE,
    ) -> None:
        self.interval = interval
        self._slots = supervisor.running.derive(_slots)  # each snapshot's models (a reload adds some)
        self._supervisor = supervisor
        self._metrics = metrics
        self._points: collections.deque[dict[str, Any]] = collections.deque(maxlen=size)
        self._seq = itertools.count(1)
        self._last: _Totals | None = None
        #: Resident memory (bytes) of each running instance's process at the last sample.
        self.rss: dict[str, int] = {}
        self.waiting: Callable[[], dict[str, int]] | None = None

    def _totals(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for attr, suffix, key in _SOURCES:
            for family in getattr(self._metrics, attr).collect():
                for s in family.samples:
                    if s.name == family.name + suffix:
                        model = s.labels.get("model", "")
                        per = out.setdefault(model, {})
                        per[key] = per.get(key, 0.0) + s.value
        return out

    def sample(self) -> dict[str, Any] | None:
        """Take one sample now; returns the new point (None for the first call, the baseline)."""
        now = time.monotonic()
        totals = self._totals()
        self._sample_memory()
        last, self._last = self._last, _Totals(totals, now)
        if last is None:
            return None
        dt = max(now - last.at, 1e-6)
        held = self.waiting() if self.waiting is not None else {}
        models = {}
        for name, slots in self._slots().items():
            cur, prev = totals.get(name, {}), last.values.get(name, {})
            d = {k: cur.get(k, 0.0) - prev.get(k, 0.0) for k in cur}
            in_flight = int(cur.get("in_flight", 0.0))
            serving = sum(1 for i in self._supervisor.for_model(name) if i.state in SERVING)
            steps = d.get("generated", 0.0) - d.get("accepted", 0.0)
            models[name] = {
                "rps": d.get("requests", 0.0) / dt,
                "decode_tps": _ratio(d.get("tps_sum"), d.get("tps_n")),
                "gen_tps": d.get("generated", 0.0) / dt,
                "acceptance": _ratio(d.get("accepted"), d.get("drafted")),
                "tokens_per_step": _ratio(d.get("generated"), steps) if d.get("drafted") else None,
                "ttft_s": _ratio(d.get("ttft_sum"), d.get("ttft_n")),
                "in_flight": in_flight,
                "queued": held.get(name, 0) + max(0, in_flight - slots * max(serving, 1)),
            }
        point = {"seq": next(self._seq), "t": time.time(), "models": models}
        self._points.append(point)
        return point

    def _sample_memory(self) -> None:
        rss = {}
        for inst in self._supervisor.instances:
            if inst.pid is None or inst.state not in SERVING:
                continue
            with contextlib.suppress(psutil.Error):
                rss[inst.name] = psutil.Process(inst.pid).memory_info().rss
        self.rss = rss

    @property
    def last_seq(self) -> int:
        """Sequence number of the newest point (0 before the first)."""
        return self._points[-1]["seq"] if self._points else 0

    def since(self, seq: int) -> list[dict[str, Any]]:
        """Points with a sequence number above ``seq`` (0: every point kept), oldest first."""
        return [p for p in self._points if p["seq"] > seq]

    async def run(self) -> None:
        """Sample every ``interval`` seconds until cancelled."""
        while True:
            self.sample()
            await asyncio.sleep(self.interval)


def _ratio(num: float | None, den: float | None) -> float | None:
    """``num / den``, or None when nothing was counted (``den`` absent or not positive)."""
    if not den or den <= 0:
        return None
    return (num or 0.0) / den


def _slots(config: Config) -> dict[str, int]:
    return {m.name: m.parallel for m in config.models}
