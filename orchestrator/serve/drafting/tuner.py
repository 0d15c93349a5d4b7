"""The draft-length policy on the request path: per model with ``speculative.adaptive: true``,
it sets ``speculative.n_max`` of each generating request (``decide``) and learns from the
answer's ``timings`` (``learn``).

The statistics and the choice are the pure ``draft_policy`` (classes: ``draft_classes``); this
module holds one ``draft_policy.State`` per model, counts the choices in Prometheus
(``orchestrator_draft_policy_choices_total{model,class,k,reason}``,
``orchestrator_draft_policy_expected_tokens_per_second{model,class,k}``) and keeps the last
choices for ``/status`` and the console. A request's own ``speculative.n_max`` (or drafting off
for token probabilities) wins: it is not changed, and its answer still feeds the statistics.
The draft lengths the policy may choose are 0 .. the model's launch ``n_max`` (the slots' draft
buffers are sized for it; patch 0002 clamps larger values).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from orchestrator.config.running import RunningConfig
from orchestrator.config.schema import Config, ModelConfig
from orchestrator.serve.drafting import classes as draft_classes
from orchestrator.serve.drafting import policy as draft_policy

RECENT = 50  # choices kept per model for /status and the console
FLAT = "speculative.n_max"


@dataclass(frozen=True)
class Ticket:
    """What ``decide`` chose for one request; ``learn`` takes it back with the answer's timings."""

    model: str
    cls: draft_classes.RequestClass
    k: int
    reason: str
    row: dict[str, Any]  # this request's row in ``recent`` (the answer's figures are added)


class DraftTuner:
    """Per-model draft-length policies of one app, following the running config: after a reload
    what was learned is kept for models that stay adaptive with the same launch ``n_max``."""

    def __init__(self, running: RunningConfig, registry: CollectorRegistry) -> None:
        self.running = running
        self._config: Config | None = None  # the snapshot ``params`` were taken from
        self.states: dict[str, draft_policy.State] = {}
        self.params: dict[str, draft_policy.Params] = {}
        self.recent: dict[str, deque[dict[str, Any]]] = {}
        self.choices = Counter(
            "orchestrator_draft_policy_choices",
            "Draft lengths chosen per request by the adaptive policy, by request class and reason",
            ["model", "class", "k", "reason"],
            registry=registry,
        )
        self.expected = Gauge(
            "orchestrator_draft_policy_expected_tokens_per_second",
            "The adaptive policy's expected decode tok/s of each draft length, per request class",
            ["model", "class", "k"],
            registry=registry,
        )
        self._expected_labels: set[tuple[str, str, str]] = set()  # the (model, class, k) series set
        self._sync()

    def _sync(self) -> None:
        """Follow a reload: models that turned adaptive start empty, others stop."""
        config = self.running.current
        if config is self._config:
            return
        self._config = config
        params = {
            m.name: draft_policy.Params(ks=tuple(range(m.speculative.n_max + 1)))
            for m in config.models
            if m.speculative.adaptive
        }
        self.states = {n: s for n, s in self.states.items() if n in params and params[n] == self.params.get(n)}
        self.recent = {n: r for n, r in self.recent.items() if n in self.states}
        # statistics dropped: so are their expectations (a K no longer launched kept its last figure)
        for labels in [lb for lb in self._expected_labels if lb[0] not in self.states]:
            self.expected.remove(*labels)
            self._expected_labels.discard(labels)
        for name in params:
            self.states.setdefault(name, draft_policy.State())
            self.recent.setdefault(name, deque(maxlen=RECENT))
        self.params = params

    def decide(
        self, kind: str | None, model: ModelConfig, body: dict[str, Any], drafting_off: str | None = None
    ) -> tuple[dict[str, Any] | None, Ticket | None]:
        """``(new body or None, ticket or None)`` for a request of route ``kind`` to ``model`` (None: a
        route that does not generate, per its adapter's ``generates``; Anthropic's ``/v1/messages``
        generates and passes ``speculative.n_max`` on through native patch 0005):
        the body with the chosen ``speculative.n_max`` when the policy chose; a ticket whenever
        the answer should be learned from. ``drafting_off``: why the proxy itself set K = 0
        (``token_probs``), shown as the reason instead of ``client``."""
        self._sync()
        params = self.params.get(model.name)
        if params is None or kind is None:
            return None, None
        cls = draft_classes.classify(kind, body)
        own = body.get(FLAT)
        if isinstance(own, int) and not isinstance(own, bool):
            return None, self._record(model.name, cls, min(own, params.ks[-1]), drafting_off or "client", None)
        state = self.states[model.name]
        choice = draft_policy.choose(state, cls.key, cls.depth, params)
        self.states[model.name] = draft_policy.counted(state, cls.key)
        ticket = self._record(model.name, cls, choice.k, choice.reason, choice.expected)
        return {**body, FLAT: choice.k}, ticket

    def _record(self, model: str, cls: draft_classes.RequestClass, k: int, reason: str, expected: Any) -> Ticket:
        self.choices.labels(model, cls.key, str(k), reason).inc()
        for kk, tps in (expected or {}).items():
            self.expected.labels(model, cls.key, str(kk)).set(round(tps, 3))
            self._expected_labels.add((model, cls.key, str(kk)))
        row = {"at": time.time(), "class": cls.key, "k": k, "reason": reason}
        if expected:
            row["expected"] = {str(kk): round(v, 2) for kk, v in expected.items()}
        self.recent[model].append(row)
        return Ticket(model, cls, k, reason, row)

    def learn(self, ticket: Ticket | None, timings: dict[str, Any]) -> None:
        """Add one answer's ``timings`` to its model's statistics (and to its row in ``recent``)."""
        if ticket is None or ticket.model not in self.states:
            return
        obs = draft_policy.observation(ticket.k, timings)
        if obs is None:
            return
        params = self.params[ticket.model]
        state = self.states[ticket.model]
        self.states[ticket.model] = draft_policy.observe(state, ticket.cls.key, ticket.cls.depth, obs, params)
        ticket.row["tokens_per_second"] = round(1000.0 * obs.tokens / obs.ms, 2)
        ticket.row["accepted"] = f"{obs.accepted}/{obs.drafted}"

    def status(self) -> dict[str, Any]:
        """Per adaptive model: its draft lengths and the last choices (newest first)."""
        self._sync()
        return {
            name: {"ks": list(self.params[name].ks), "recent": list(reversed(self.recent[name]))}
            for name in self.params
        }
