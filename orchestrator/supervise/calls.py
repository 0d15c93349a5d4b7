"""The requests in flight on one child, as its ``GET /slots`` names them (``Calls``).

The proxy opens a ``Call`` for every request it sends to a replica and sends its ``id`` as the
``X-Request-Id`` header; llama-server (native patch 0009) shows it in ``/slots`` as
``params.id_request`` of the slot that runs it. So the supervisor's watch knows:

- which requests a slot ever took (``started``): one that never did may be sent again after the
  child was restarted (it cannot have caused the crash, and nothing of it reached the client);
- which request a slot without progress runs, so that only that one is cancelled and sent again
  (``abandon``), before the child is restarted as a last resort.

A llama-server without the patch shows no ids: a request pinned to a slot (``id_slot``) is
still found by its slot; ``started`` stays unknown (None) and the proxy keeps its older rule.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass

_PREFIX = f"orc-{os.getpid():x}-"


@dataclass(frozen=True)
class SlotMark:
    """What one busy slot has done: its task, prompt tokens processed, tokens decoded, and the
    request id the orchestrator gave it (``id_request``, native patch 0009; None without it)."""

    task: int | None
    processed: int
    decoded: int
    request: str | None = None


class Call:
    """One request in flight on a child: its ``id`` (``X-Request-Id``), the slot it named
    (``id_slot``, or None), whether a slot took it, and whether the watch gave up on it."""

    def __init__(self, call_id: str, slot: int | None) -> None:
        self.id = call_id
        self.slot = slot
        self.started = False  # seen in a slot of the child (or its stream head came)
        self.reason: str | None = None  # why the watch abandoned it (None: it did not)
        self._task = asyncio.current_task()

    def abandon(self, reason: str) -> None:
        """The watch gives up on this request's slot: cancel the task that waits for its answer
        (the proxy then closes the upstream request, which frees the slot, and sends it again
        when nothing of it reached the client)."""
        if self.reason is None:
            self.reason = reason
            if self._task is not None and not self._task.done():
                self._task.cancel(msg=reason)


class Calls:
    """The ``Call``\\s in flight on one instance (all its launches); ``ids`` tells whether the
    child shows request ids in ``/slots`` (True once one was seen: a patched llama-server)."""

    def __init__(self) -> None:
        self._calls: dict[str, Call] = {}
        self._numbers = itertools.count(1)
        self.ids = False

    def __iter__(self) -> Iterator[Call]:
        return iter(list(self._calls.values()))

    def open(self, slot: int | None) -> Call:
        """A new call (in the current task), pinned to ``slot`` or not."""
        call = Call(f"{_PREFIX}{next(self._numbers)}", slot)
        self._calls[call.id] = call
        return call

    def close(self, call: Call) -> None:
        self._calls.pop(call.id, None)

    def seen(self, marks: dict[int, SlotMark]) -> None:
        """Mark the calls that the busy slots of one ``/slots`` answer run as started."""
        for mark in marks.values():
            if mark.request is not None:
                self.ids = True
                call = self._calls.get(mark.request)
                if call is not None:
                    call.started = True

    def on_slot(self, slot: int, mark: SlotMark) -> Call | None:
        """The call that slot ``slot`` runs: by its request id, else the one call pinned to it."""
        if mark.request is not None:
            return self._calls.get(mark.request)
        pinned = [c for c in self._calls.values() if c.slot == slot]
        return pinned[0] if len(pinned) == 1 else None

    def started(self, call: Call) -> bool | None:
        """Whether a slot took ``call``; None when the child does not say (no request ids seen)."""
        return True if call.started else (False if self.ids else None)
