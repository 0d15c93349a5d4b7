"""Whether each busy slot of a serving llama-server makes progress (pure; read from ``GET /slots``).

A child can answer ``/slots`` (its main loop turns) while a slot it calls busy does nothing: a
task given a slot and never scheduled spins the loop at 100 % CPU and its client waits for ever
(the livelock of a pinned request on a busy slot; ``responsiveness.watch`` saw a child that
answers and called it healthy). Progress is what a slot does: its task changes, or its prompt
tokens processed or tokens decoded grow (``n_prompt_tokens_processed``, ``next_token.n_decoded``).

``ProgressWatch.observe`` takes each ``/slots`` answer and names the busy slots that made no
progress for the limit: ``no_progress`` s (``server.timeouts.no_progress``), or longer on a
child whose steps are slow: ``STEP_FACTOR`` times the longest step seen on it (the time between
two advances of one slot's counters: a long prefill batch on a CPU), up to ``STEP_CAP_S``.
``NoProgress`` is what the instance's watch does with them (cancel and resend, then restart).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.supervise.calls import Calls, SlotMark
from orchestrator.supervise.states import Outcome, PhaseEnd

STEP_FACTOR = 3.0  # the limit is at least this many of the child's slowest step seen
STEP_CAP_S = 300.0  # ... but never more than this (a step that slow is itself a stall)
RETRY_WINDOW = 4.0  # limits: a slot stuck again this soon after its request was cancelled gets the child restarted


@dataclass(frozen=True)
class Stuck:
    """A busy slot without progress for ``seconds`` (limit ``limit``)."""

    slot: int
    mark: SlotMark
    seconds: float
    limit: float

    def describe(self) -> str:
        task = f"task {self.mark.task}" if self.mark.task is not None else "its task"
        return (
            f"slot {self.slot} ({task}) made no progress for {self.seconds:.0f} s "
            f"(processed {self.mark.processed}, decoded {self.mark.decoded}; limit {self.limit:.0f} s, "
            "server.timeouts.no_progress)"
        )


def busy_slots(payload: Any) -> dict[int, SlotMark]:
    """The busy slots of a ``GET /slots`` answer (a list of slot objects); {} for anything else."""
    if not isinstance(payload, list):
        return {}
    out: dict[int, SlotMark] = {}
    for slot in payload:
        if not isinstance(slot, dict) or not slot.get("is_processing") or not isinstance(slot.get("id"), int):
            continue
        tokens = slot.get("next_token")
        decoded = tokens[0].get("n_decoded", 0) if isinstance(tokens, list) and tokens else 0
        params = slot.get("params") if isinstance(slot.get("params"), dict) else {}
        request = params.get("id_request") if isinstance(params, dict) else None
        out[slot["id"]] = SlotMark(
            task=slot.get("id_task") if isinstance(slot.get("id_task"), int) else None,
            processed=int(slot.get("n_prompt_tokens_processed") or 0),
            decoded=int(decoded or 0),
            request=request if isinstance(request, str) and request else None,
        )
    return out


class ProgressWatch:
    """Progress of the busy slots of one child (one launch), fed ``/slots`` answers in time order.

    Args:
        no_progress: seconds a busy slot may go without progress (at least; see the module).
    """

    def __init__(self, no_progress: float) -> None:
        self.no_progress = no_progress
        self._marks: dict[int, tuple[SlotMark, float]] = {}  # slot -> (its mark, when it last changed)
        self.slowest_step = 0.0  # s: the longest time one slot took between two advances

    @property
    def limit(self) -> float:
        """Seconds without progress before a busy slot is stuck, on this child."""
        return max(self.no_progress, min(STEP_CAP_S, STEP_FACTOR * self.slowest_step))

    def observe(self, slots: dict[int, SlotMark], now: float) -> list[Stuck]:
        """Take one ``/slots`` answer (``busy_slots``) seen at monotonic ``now``; the stuck slots."""
        stuck: list[Stuck] = []
        for slot in [s for s in self._marks if s not in slots]:
            del self._marks[slot]  # idle now: whatever it ran is over
        for slot, mark in slots.items():
            before = self._marks.get(slot)
            if before is None or before[0] != mark:
                if before is not None and before[0].task == mark.task:
                    self.slowest_step = max(self.slowest_step, now - before[1])
                self._marks[slot] = (mark, now)
                continue
            quiet = now - before[1]
            if quiet >= self.limit:
                stuck.append(Stuck(slot, mark, quiet, self.limit))
        return stuck

    def forget(self, slot: int, now: float) -> None:
        """Start ``slot``'s clock again (a recovery was just tried on it)."""
        if slot in self._marks:
            self._marks[slot] = (self._marks[slot][0], now)


class NoProgress:
    """The recovery of one instance's stuck slots, fed every ``/slots`` answer of its watch.

    A stuck slot's request is abandoned first (``Call.abandon``: the proxy closes it, which makes
    llama-server cancel its task and free the slot, and sends it again when nothing of it reached
    the client): ``cancels`` counts these. A slot stuck again within ``RETRY_WINDOW`` limits of
    that (the same task, or the resent request on it), or one whose request cannot be found, ends
    the watch: the child is restarted (``restarts``), and the requests it never started are sent
    again (``Calls.started``).

    Args:
        calls: the instance's requests in flight.
        no_progress: ``server.timeouts.no_progress`` (s).
        notify: called with one line per recovery (the instance's warning and log).
    """

    def __init__(self, calls: Calls, no_progress: float, notify: Callable[[str], None]) -> None:
        self.calls = calls
        self.no_progress = no_progress
        self.cancels = 0
        self.restarts = 0
        self._notify = notify
        self._watch = ProgressWatch(no_progress)
        self._tried: dict[int, float] = {}  # slot -> when its request was last abandoned (monotonic s)

    def launched(self) -> None:
        """A new child: nothing of the last one's slots holds."""
        self._watch = ProgressWatch(self.no_progress)
        self._tried.clear()

    def on_slots(self, payload: Any, now: float) -> PhaseEnd | None:
        """One ``/slots`` answer: mark started requests, recover stuck slots; a restart ends the watch."""
        marks = busy_slots(payload)
        self.calls.seen(marks)
        for stuck in self._watch.observe(marks, now):
            call = self.calls.on_slot(stuck.slot, stuck.mark)
            again = now - self._tried.get(stuck.slot, float("-inf")) < RETRY_WINDOW * stuck.limit
            if call is not None and not again:
                self._tried[stuck.slot] = now
                self.cancels += 1
                self._notify(f"{stuck.describe()}: its request was cancelled and is sent again")
                call.abandon(stuck.describe())
                self._watch.forget(stuck.slot, now)
                continue
            self.restarts += 1
            why = "its request did not free it" if call is not None else "no request of ours runs there"
            line = f"{stuck.describe()} and {why}: the child was killed and restarted"
            self._notify(line)
            return PhaseEnd(Outcome.STALLED, line, grace=0.0)
        return None
