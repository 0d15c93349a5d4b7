"""Whether a serving llama-server still answers (``Responsiveness``), and the watch that decides it.

A child can be alive and say ``/health`` ok while its main loop is stuck inside one slot (see
``ChildProbe.main_loop_answers``). Between the moment the watch stops getting answers and the
stall verdict (``SupervisorPolicy.stall_timeout``), the replica is marked unresponsive after
``SupervisorPolicy.unresponsive_after`` seconds: the proxy's ``/health`` stops saying ok and no
new request is routed to it.

Liveness is the main loop answering (``ChildProbe.slots``); log lines are not, because
llama-server's HTTP threads keep logging (a client's cancel) while the main loop is stuck. Progress
is more than liveness: a loop that answers can still spin with a slot that never advances, so
while requests are in flight every tick's ``/slots`` answer goes to ``on_slots``
(``progress.NoProgress.on_slots``), which may end the watch. An idle child (no request in flight)
that answered is probed only every ``unresponsive_after / 2`` s: a main loop with no slot busy has
nothing to get stuck in, and a frozen idle child is still marked within ``unresponsive_after``.
Without ``on_slots`` a probe is skipped when a response's timings came within the last tick
(``Responsiveness.result_at``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from orchestrator.supervise.readiness import Health
from orchestrator.supervise.states import Outcome, PhaseEnd, SupervisorPolicy

WARNING_KEY = "unresponsive"


class Responsiveness:
    """The unresponsive mark of one instance, with its warning line.

    Args:
        warnings: the instance's warnings (key -> line); the mark adds and removes its line.
        notify: called when the mark changes.
    """

    def __init__(self, warnings: dict[str, str], notify: Callable[[], None]) -> None:
        self.since: float | None = None  # monotonic time of the last answer before the silence
        # monotonic time the proxy last got a response's ``timings`` (``Instance.record_timings``):
        # only the main loop writes them, so they are an answer as good as the probe's
        self.result_at = float("-inf")
        self._warnings = warnings
        self._notify = notify

    @property
    def responsive(self) -> bool:
        """False while the instance is marked unresponsive."""
        return self.since is None

    def mark(self, since: float | None) -> None:
        """Mark unresponsive (silent since monotonic ``since``), or clear the mark (None)."""
        if (since is None) == (self.since is None):
            return
        self.since = since
        if since is None:
            self._warnings.pop(WARNING_KEY, None)
        else:
            self._warnings[WARNING_KEY] = "llama-server is not answering (main loop stuck?); restart pending"
        self._notify()


async def watch(
    answers: Callable[[], Awaitable[tuple[Health, Any]]],
    next_event: Callable[[float], Awaitable[PhaseEnd | None]],
    mark: Responsiveness,
    policy: SupervisorPolicy,
    in_flight: Callable[[], int],
    on_slots: Callable[[Any, float], PhaseEnd | None] | None = None,
) -> PhaseEnd:
    """Watch a serving child until an event, a main loop that answers nothing for ``stall_timeout`` s,
    or a busy slot that makes no progress (``on_slots``; see the module).

    Args:
        answers: one probe of the main loop: its health and the ``/slots`` answer (None without one).
        next_event: waits up to the given seconds for a request or the child's exit (None: a tick).
        mark: the instance's unresponsive mark (and ``result_at``); always cleared when the watch ends.
        policy: ``watch_interval``, ``unresponsive_after`` and ``stall_timeout`` (seconds).
        in_flight: requests in flight on the instance (the probe rate, the stall message).
        on_slots: takes each ``/slots`` answer and the monotonic time; a ``PhaseEnd`` ends the watch.

    Returns:
        The event, ``Outcome.STALLED`` (grace 0: a stuck child has nothing to drain), or what
        ``on_slots`` returned.
    """
    answered = time.monotonic()
    idle_every = max(policy.watch_interval, policy.unresponsive_after / 2)
    try:
        while True:
            event = await next_event(policy.watch_interval)
            if event is not None:
                return event
            now = time.monotonic()
            busy = in_flight() > 0
            if not busy and now - answered < idle_every:
                continue
            if on_slots is None and now - mark.result_at < policy.watch_interval:
                answered = now
                mark.mark(None)
                continue
            health, slots = await answers()
            if health is Health.READY:
                answered = time.monotonic()
                mark.mark(None)
                if on_slots is not None and slots is not None and (end := on_slots(slots, answered)) is not None:
                    return end
                continue
            silent = time.monotonic() - answered
            if silent >= policy.unresponsive_after:
                mark.mark(answered)
            if silent > policy.stall_timeout:
                return PhaseEnd(
                    Outcome.STALLED,
                    f"stalled: llama-server answered nothing for {silent:.0f} s (stall timeout "
                    f"{policy.stall_timeout:g} s, server.timeouts.stall) with {in_flight()} request(s) "
                    "in flight; killed and restarted",
                    grace=0.0,
                )
    finally:
        mark.mark(None)
