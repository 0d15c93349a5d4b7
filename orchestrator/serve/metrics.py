"""Prometheus metrics of one proxy app (``GET /metrics``).

Every app gets its own ``CollectorRegistry`` (never the global one), so tests can build many
apps in one process. Request-path metrics are updated as requests pass; instance state,
restarts and the acceptance rate are read from the supervisor and the counters at scrape time
by a custom collector, so they can never go stale.

Per model (label ``model``, the configured name, never an alias):

=================================================  =========  ==========================================
metric                                             type       meaning
=================================================  =========  ==========================================
``orchestrator_requests_total``                    counter    requests by ``endpoint`` and HTTP ``status``
``orchestrator_requests_in_flight``                gauge      requests being forwarded now
``orchestrator_time_to_first_token_seconds``       histogram  streamed: first upstream event; otherwise
                                                              total minus llama-server's decode time
``orchestrator_request_duration_seconds``          histogram  request received -> response complete
``orchestrator_prompt_tokens_total``               counter    ``timings.prompt_n`` (tokens processed), else the
                                                              answer's ``usage`` (Anthropic, Responses)
``orchestrator_prompt_cached_tokens``              histogram  ``timings.cache_n``: prompt tokens per request from a
                                                              slot's cache (a restore, a warm prefix, an earlier turn)
``orchestrator_completion_tokens_total``           counter    ``timings.predicted_n`` (tokens generated), else ``usage``
``orchestrator_decode_tokens_per_second``          histogram  ``timings.predicted_per_second`` (tok/s)
``orchestrator_draft_tokens_total``                counter    ``timings.draft_n`` (MTP tokens drafted)
``orchestrator_draft_accepted_tokens_total``       counter    ``timings.draft_n_accepted``
``orchestrator_draft_acceptance_rate``             gauge      accepted / drafted since start
``orchestrator_repairs_total``                     counter    request/response repairs by ``kind``
``orchestrator_upstream_retries_total``            counter    resends after a dead keep-alive socket
``orchestrator_drafting_off_total``                counter    requests sent with drafting off, by ``reason``
                                                              (``token_probs``: per-token probabilities asked for)
``orchestrator_instance_state``                    gauge      1 for each replica's current ``state``
``orchestrator_instance_restarts_total``           counter    restarts of each replica (supervisor)
``orchestrator_instance_no_progress_total``        counter    busy slots without progress, by ``action``: its
                                                              request cancelled and resent, or the child restarted
``orchestrator_kv_*``                              mixed      saved/restored slots, restore seconds, verification
                                                              failures (``orchestrator.supervise.kv_persist``)
``orchestrator_model_loads_total``                 counter    loads that reached ready
``orchestrator_model_load_failures_total``         counter    loads that failed
``orchestrator_model_load_seconds``                histogram  load start -> every replica serves (s)
``orchestrator_model_unloads_total``               counter    unloads by ``reason``: ttl, memory (an
                                                              eviction for another model), request,
                                                              reload, shutdown
``orchestrator_model_swaps_total``                 counter    evictions made to fit another model
``orchestrator_queue_wait_seconds``                histogram  how long a request was held (load, swap)
``orchestrator_queued_requests``                   gauge      requests held now
``orchestrator_model_state``                       gauge      1 for each model's lifecycle ``state``
``orchestrator_loaded_bytes``                      gauge      estimated bytes our models hold, per
                                                              ``device`` (``cpu`` or a GPU index)
``orchestrator_memory_capacity_bytes``             gauge      the budget per ``device``
=================================================  =========  ==========================================

Requests that fail before a model is known (bad JSON, unknown model) count under
``model="-"``, so client input never becomes a label value.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from orchestrator.supervise.model_state import ModelState
from orchestrator.supervise.supervisor import ProcessState

if TYPE_CHECKING:
    from orchestrator.supervise.model_state import ModelEvent
    from orchestrator.supervise.scheduler import ModelScheduler
    from orchestrator.supervise.supervisor import Supervisor

CONTENT_TYPE = CONTENT_TYPE_LATEST
NO_MODEL = "-"

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_DRAFTING_OFF_HELP = "Requests run with MTP drafting turned off, by reason"
_TPS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
_LOAD_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)


_CACHED = ("orchestrator_prompt_cached_tokens", "Prompt tokens per request from a slot's cache (timings.cache_n)")
_CACHED_BUCKETS = (0, 16, 256, 1024, 4096, 16384, 65536, 262144)


class ModelMetrics:
    """The metric children of one model, bound once so the request path skips label lookups.

    Use :meth:`ProxyMetrics.model` to get one.
    """

    def __init__(self, parent: ProxyMetrics, model: str) -> None:
        self._parent = parent
        self.model = model
        self.in_flight = parent.in_flight.labels(model)
        self.ttft = parent.ttft.labels(model)
        self.duration = parent.duration.labels(model)
        self._prompt = parent.prompt_tokens.labels(model)
        self._cached = parent.cached_tokens.labels(model)
        self._completion = parent.completion_tokens.labels(model)
        self._tps = parent.decode_tps.labels(model)
        self._drafted = parent.drafted.labels(model)
        self._accepted = parent.accepted.labels(model)
        self._retries = parent.retries.labels(model)
        self._drafting_off: dict[str, Any] = {}
        self._requests: dict[tuple[str, int], Any] = {}
        self._repairs: dict[str, Any] = {}
        #: Totals (tokens) kept as plain ints for the acceptance rate computed at scrape time.
        self.drafted_total = 0
        self.accepted_total = 0

    def request(self, endpoint: str, status: int) -> None:
        """Count one finished request to ``endpoint`` (e.g. ``"chat"``) answered with HTTP ``status``."""
        child = self._requests.get((endpoint, status))
        if child is None:
            child = self._parent.requests.labels(self.model, endpoint, str(status))
            self._requests[(endpoint, status)] = child
        child.inc()

    def repair(self, kind: str) -> None:
        """Count one repair of ``kind`` (e.g. ``"system_merged"``, ``"think_split"``)."""
        child = self._repairs.get(kind)
        if child is None:
            child = self._parent.repairs.labels(self.model, kind)
            self._repairs[kind] = child
        child.inc()

    def drafting_off(self, reason: str) -> None:
        """Count one request sent with drafting turned off, for ``reason`` (e.g. ``"token_probs"``)."""
        child = self._drafting_off.get(reason)
        if child is None:
            child = self._drafting_off[reason] = self._parent.drafting_off.labels(self.model, reason)
        child.inc()

    def usage(self, usage: Any) -> None:
        """Account an answer's ``usage`` object (tokens) when it carried no ``timings``.

        Prompt tokens count as processed, like ``timings.prompt_n``: OpenAI's ``prompt_tokens`` and
        Responses' ``input_tokens`` less their ``*_details.cached_tokens``; Anthropic's
        ``input_tokens`` already leaves out ``cache_read_input_tokens``. Completion tokens are
        ``completion_tokens`` or ``output_tokens``. Anything else is skipped.
        """
        if not isinstance(usage, dict):
            return
        prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
        details = usage.get("prompt_tokens_details", usage.get("input_tokens_details"))
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        completion = usage.get("completion_tokens", usage.get("output_tokens"))
        if isinstance(prompt, int) and prompt > 0:
            self._prompt.inc(max(0, prompt - (cached if isinstance(cached, int) else 0)))
        if isinstance(completion, int) and completion > 0:
            self._completion.inc(completion)

    def retry(self) -> None:
        """Count one resend after the upstream closed a kept-alive connection without answering."""
        self._retries.inc()

    def timings(self, timings: dict[str, Any]) -> None:
        """Account one response's llama-server ``timings`` object.

        Args:
            timings: ``prompt_n`` and ``predicted_n`` (tokens), ``predicted_per_second`` (tok/s),
                and, once anything was drafted, ``draft_n`` and ``draft_n_accepted`` (tokens).
                Missing or non-numeric fields are skipped.
        """
        prompt_n = timings.get("prompt_n")
        if isinstance(prompt_n, int) and prompt_n > 0:
            self._prompt.inc(prompt_n)
        cache_n = timings.get("cache_n")
        if isinstance(cache_n, int) and cache_n >= 0:
            self._cached.observe(cache_n)
        predicted_n = timings.get("predicted_n")
        if isinstance(predicted_n, int) and predicted_n > 0:
            self._completion.inc(predicted_n)
        tps = timings.get("predicted_per_second")
        if isinstance(tps, (int, float)) and tps > 0 and isinstance(predicted_n, int) and predicted_n > 1:
            self._tps.observe(tps)
        drafted = timings.get("draft_n")
        if isinstance(drafted, int) and drafted > 0:
            accepted = timings.get("draft_n_accepted")
            accepted = accepted if isinstance(accepted, int) and accepted >= 0 else 0
            self._drafted.inc(drafted)
            self._accepted.inc(accepted)
            self.drafted_total += drafted
            self.accepted_total += accepted


class ProxyMetrics:
    """All metrics of one app, in a private registry.

    Args:
        supervisor: read at scrape time for instance state and restarts.
        models: configured model names (their children are created up front so every model
            shows in ``/metrics`` from the start).
    """

    def __init__(self, supervisor: Supervisor, models: list[str], scheduler: ModelScheduler | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.scheduler = _SchedulerMetrics(r, scheduler) if scheduler is not None else None
        self.requests = Counter(
            "orchestrator_requests", "Requests by endpoint and HTTP status", ["model", "endpoint", "status"], registry=r
        )
        self.in_flight = Gauge("orchestrator_requests_in_flight", "Requests being forwarded now", ["model"], registry=r)
        self.ttft = Histogram(
            "orchestrator_time_to_first_token_seconds",
            "Time to first token (s)",
            ["model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.duration = Histogram(
            "orchestrator_request_duration_seconds",
            "Total request latency (s)",
            ["model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = Counter(
            "orchestrator_prompt_tokens", "Prompt tokens processed (timings.prompt_n)", ["model"], registry=r
        )
        self.completion_tokens = Counter(
            "orchestrator_completion_tokens", "Tokens generated (timings.predicted_n)", ["model"], registry=r
        )
        self.decode_tps = Histogram(
            "orchestrator_decode_tokens_per_second",
            "Decode speed per response (tok/s, timings.predicted_per_second)",
            ["model"],
            buckets=_TPS_BUCKETS,
            registry=r,
        )
        self.drafted = Counter(
            "orchestrator_draft_tokens", "Tokens drafted by the MTP head (timings.draft_n)", ["model"], registry=r
        )
        self.accepted = Counter(
            "orchestrator_draft_accepted_tokens",
            "Drafted tokens accepted (timings.draft_n_accepted)",
            ["model"],
            registry=r,
        )
        self.repairs = Counter(
            "orchestrator_repairs", "Request and response repairs by kind", ["model", "kind"], registry=r
        )
        self.retries = Counter(
            "orchestrator_upstream_retries",
            "Requests resent after llama-server closed a kept-alive connection unanswered",
            ["model"],
            registry=r,
        )
        self.drafting_off = Counter("orchestrator_drafting_off", _DRAFTING_OFF_HELP, ["model", "reason"], registry=r)
        self._models: dict[str, ModelMetrics] = {}
        for name in models:
            self.model(name)
        r.register(_SupervisorCollector(supervisor, self))
        if scheduler is not None:
            r.register(_SchedulerCollector(scheduler))

    @functools.cached_property
    def cached_tokens(self) -> Histogram:
        """Prompt tokens per request from a slot's cache (made with the first model's metrics)."""
        return Histogram(*_CACHED, ["model"], buckets=_CACHED_BUCKETS, registry=self.registry)

    def model(self, name: str) -> ModelMetrics:
        """The bound metrics of model ``name`` (use :data:`NO_MODEL` when none is known)."""
        found = self._models.get(name)
        if found is None:
            found = self._models[name] = ModelMetrics(self, name)
        return found

    def models(self) -> list[ModelMetrics]:
        """Every model's metrics created so far."""
        return list(self._models.values())

    def render(self) -> bytes:
        """The Prometheus text exposition of everything in this registry."""
        return generate_latest(self.registry)


class _SupervisorCollector(Collector):
    """Reads the supervisor and the draft counters when ``/metrics`` is scraped."""

    def __init__(self, supervisor: Supervisor, metrics: ProxyMetrics) -> None:
        self._supervisor = supervisor
        self._metrics = metrics

    def collect(self) -> Iterator[Any]:
        state = GaugeMetricFamily(
            "orchestrator_instance_state",
            "1 for the current state of each replica",
            labels=["model", "instance", "state"],
        )
        restarts = CounterMetricFamily(
            "orchestrator_instance_restarts", "Restarts of each replica", labels=["model", "instance"]
        )
        no_progress = CounterMetricFamily(
            "orchestrator_instance_no_progress",
            "Busy slots that made no progress: their request cancelled and sent again (cancel), or the child "
            "restarted (restart)",
            labels=["model", "instance", "action"],
        )
        for inst in self._supervisor.instances:
            model, name = inst.spec.model, inst.spec.name
            for s in ProcessState:
                state.add_metric([model, name, s.value], 1.0 if inst.state is s else 0.0)
            restarts.add_metric([model, name], float(inst.restarts))
            no_progress.add_metric([model, name, "cancel"], float(inst.no_progress.cancels))
            no_progress.add_metric([model, name, "restart"], float(inst.no_progress.restarts))
        yield state
        yield restarts
        yield no_progress
        rate = GaugeMetricFamily(
            "orchestrator_draft_acceptance_rate",
            "Accepted / drafted MTP tokens since start (absent before any drafting)",
            labels=["model"],
        )
        for m in self._metrics.models():
            if m.drafted_total:
                rate.add_metric([m.model], m.accepted_total / m.drafted_total)
        yield rate


class _SchedulerMetrics:
    """Counters and histograms fed by the lifecycle's events (``ModelScheduler.listeners``)."""

    def __init__(self, r: CollectorRegistry, scheduler: ModelScheduler) -> None:
        self.loads = Counter("orchestrator_model_loads", "Model loads that reached ready", ["model"], registry=r)
        self.failures = Counter("orchestrator_model_load_failures", "Model loads that failed", ["model"], registry=r)
        self.load_seconds = Histogram(
            "orchestrator_model_load_seconds",
            "Load start until every replica serves (s)",
            ["model"],
            buckets=_LOAD_BUCKETS,
            registry=r,
        )
        self.unloads = Counter("orchestrator_model_unloads", "Model unloads by reason", ["model", "reason"], registry=r)
        self.swaps = Counter("orchestrator_model_swaps", "Evictions made to fit another model", registry=r)
        self.queue_wait = Histogram(
            "orchestrator_queue_wait_seconds",
            "How long a request was held for a load or a swap (s)",
            ["model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        scheduler.listeners.append(self.on_event)

    def on_event(self, event: ModelEvent) -> None:
        if event.kind == "loaded":
            self.loads.labels(event.model).inc()
            if event.seconds is not None:
                self.load_seconds.labels(event.model).observe(event.seconds)
        elif event.kind == "load_failed":
            self.failures.labels(event.model).inc()
        elif event.kind == "unloaded":
            self.unloads.labels(event.model, event.reason or "-").inc()
            if event.reason == "memory":
                self.swaps.inc()
        elif event.kind == "waited" and event.seconds is not None:
            self.queue_wait.labels(event.model).observe(event.seconds)


class _SchedulerCollector(Collector):
    """Reads the lifecycle's models and device memory when ``/metrics`` is scraped."""

    def __init__(self, scheduler: ModelScheduler) -> None:
        self._scheduler = scheduler

    def collect(self) -> Iterator[Any]:
        queued = GaugeMetricFamily("orchestrator_queued_requests", "Requests held now", labels=["model"])
        state = GaugeMetricFamily(
            "orchestrator_model_state", "1 for the current lifecycle state of each model", labels=["model", "state"]
        )
        for m in self._scheduler.models.values():
            queued.add_metric([m.name], float(len(m.waiters)))
            for s in ModelState:
                state.add_metric([m.name, s.value], 1.0 if m.state is s else 0.0)
        yield queued
        yield state
        loaded = GaugeMetricFamily(
            "orchestrator_loaded_bytes", "Estimated bytes our models hold per device", labels=["device"]
        )
        capacity = GaugeMetricFamily(
            "orchestrator_memory_capacity_bytes", "Memory budget per device (bytes)", labels=["device"]
        )
        for device, info in self._scheduler.memory().items():
            loaded.add_metric([device], float(info["used"]))
            if info["capacity"] is not None:
                capacity.add_metric([device], float(info["capacity"]))
        yield loaded
        yield capacity
