"""A streamed ``compaction_trigger`` request: the model's streamed summary becomes one
``compaction`` output item (``responses.compaction``).

The summary streams from llama-server as an ordinary Responses answer; the client must see none of
its message events, only the response's life and the one item: ``response.created`` and
``response.in_progress`` pass, the answer's output events are dropped, and its
``response.completed`` becomes ``response.output_item.added`` and ``.done`` of the compaction item,
then ``response.completed`` with that item as the whole output. Pings pass, and while the summary's
tokens flow (dropped) a comment goes out every :data:`KEEPALIVE_S` seconds, so the client never
waits in silence; an error event passes and the stream ends with it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from orchestrator.errors import ApiError
from orchestrator.serve.responses.compaction import answer_text, compaction_item
from orchestrator.serve.streaming import StreamFlavor, sse_events

# the summary's own events are dropped; while they flow, the client hears a comment this often
KEEPALIVE_S = 5.0
_PASS = ("response.created", "response.in_progress", "response.failed", "response.incomplete", "error")


class CompactionStream:
    """The ``StreamCodec`` of a streamed ``compaction_trigger`` request."""

    def __init__(self, flavor: StreamFlavor, mark: Callable[[dict[str, Any]], object] | None = None) -> None:
        self.flavor = flavor
        self.mark = mark  # fixes the final response in place (incomplete when a limit cut the summary)
        self.repairs: list[str] = ["compaction_triggered"]
        self.pending = b""
        self.sequence = 0
        self.completed = False
        self.failed = False  # an error event already went out: the stream ends with it
        self.sent_at = time.monotonic()

    def feed(self, chunk: bytes) -> bytes:
        events, self.pending = sse_events(self.pending, chunk)
        return b"".join(self._event(event) for event in events)

    def is_end(self, body: bytes) -> bool:
        return self.flavor.is_end(body)

    def close(self, tail: bytes, error: ApiError | None) -> bytes:
        if self.completed or self.failed:
            return b""
        return self.flavor.error_event(error or ApiError(502, "the summary stream ended early", code="upstream_died"))

    def _event(self, event: bytes) -> bytes:
        data = next((line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")), None)
        if data is None:
            self.sent_at = time.monotonic()
            return event + b"\n\n"  # a ping comment: the client hears the summary is coming
        try:
            obj = json.loads(data)
        except ValueError:
            return b""
        kind = obj.get("type") if isinstance(obj, dict) else None
        if kind == "response.completed" and isinstance(obj.get("response"), dict):
            return self._completed(obj["response"])
        if kind in _PASS:
            self.failed = self.failed or kind in ("response.failed", "error")
            return self._send(obj)
        return self._keepalive()  # the summary's own output events are not the client's

    def _keepalive(self) -> bytes:
        now = time.monotonic()
        if now - self.sent_at < KEEPALIVE_S:
            return b""
        self.sent_at = now
        return b": writing the compaction summary\n\n"

    def _completed(self, response: dict[str, Any]) -> bytes:
        if self.mark is not None:
            self.mark(response)
        item = compaction_item(answer_text(response))
        self.completed = True
        added = {"type": "response.output_item.added", "output_index": 0, "item": item}
        done = {"type": "response.output_item.done", "output_index": 0, "item": item}
        final = {"type": "response.completed", "response": {**response, "output": [item]}}
        return self._send(added) + self._send(done) + self._send(final)

    def _send(self, obj: dict[str, Any]) -> bytes:
        self.sent_at = time.monotonic()
        obj["sequence_number"] = self.sequence
        self.sequence += 1
        return f"event: {obj['type']}\ndata: {json.dumps(obj, separators=(',', ':'))}\n\n".encode()
