"""Server-sent events from llama-server to the client, and an error event when it dies mid-stream.

:func:`relay` passes each upstream body chunk through the API adapter's :class:`StreamCodec` and
on with one ASGI ``send`` as soon as it arrives (uvicorn writes it to the socket at once: nothing
buffers in between). With :class:`SseCodec` (every API whose stream is llama-server's own SSE)
nothing is parsed or copied on that path. Two things can change that:

- a response repair can apply (``orchestrator.serve.repair.stream.StreamRepair``): then chunks are cut
  into events, and an event is parsed only when ``StreamRepair.needs_parse`` says its bytes
  might change (a cheap substring check); untouched events keep their original bytes;
- the end: the last two chunks are kept by reference, and once the stream ends the final event's
  ``timings`` (llama-server puts them on the last event before ``[DONE]``) are parsed from them
  for metrics and the supervisor's drafting check.

An OpenAI stream always ends with ``data: [DONE]``. If llama-server dies, times out or breaks the
connection mid-stream, the client gets one error event in the OpenAI shape
(``data: {"error": {...}}``, which the OpenAI SDKs raise as ``APIError``) and then ``[DONE]``,
and the response is completed, so the client never hangs. APIs whose streams have no ``[DONE]``
(Anthropic Messages, Responses) pass their own terminator (none), end marker and error event;
the Ollama adapter's codec turns the events into NDJSON lines instead.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.errors import ApiError
from orchestrator.serve.upstream.errors import UPSTREAM_FAILURES, to_api_error

Send = Callable[[dict[str, Any]], Awaitable[None]]

#: Response headers of every stream: no caching, and no buffering in an nginx-style proxy
#: in front of us (``X-Accel-Buffering``). No Content-Encoding: compression would buffer.
SSE_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
DONE = b"data: [DONE]\n\n"
_DATA = b"data: "
_TIMINGS = b'"timings":'
_USAGE = b'"usage":'


def sse_events(pending: bytes, chunk: bytes) -> tuple[list[bytes], bytes]:
    """The complete SSE events in ``pending + chunk`` (each without its blank line), and the
    partial event left over for the next chunk."""
    buf = pending + chunk
    cut = buf.rfind(b"\n\n")
    if cut < 0:
        return [], buf
    return buf[:cut].split(b"\n\n"), buf[cut + 2 :]


def error_event(error: ApiError) -> bytes:
    """One SSE event carrying ``error`` in the OpenAI envelope (bytes, ends with a blank line)."""
    return _DATA + json.dumps(error.body()).encode() + b"\n\n"


def encode_event(obj: Any) -> bytes:
    """One ``data:`` SSE event for the JSON value ``obj``."""
    return _DATA + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def final_timings(tail: bytes) -> dict[str, Any] | None:
    """The ``timings`` object of the last event in ``tail`` that has one, or None.

    Args:
        tail: the last bytes of a stream (whole events, possibly cut at the front).

    ``"timings":`` is searched as JSON syntax, so the word inside generated text (where its
    quotes are escaped) never matches.
    """
    return _last_object(tail, _TIMINGS, "timings")


def final_usage(tail: bytes) -> dict[str, Any] | None:
    """The top-level ``usage`` object of the last event in ``tail`` that has one, or None.

    For streams without ``timings`` (Anthropic's ``message_delta`` carries ``output_tokens``).
    """
    return _last_object(tail, _USAGE, "usage")


def _last_object(tail: bytes, needle: bytes, key: str) -> dict[str, Any] | None:
    at = tail.rfind(needle)
    if at < 0:
        return None
    start = tail.rfind(_DATA, 0, at)
    if start < 0:
        return None
    end = tail.find(b"\n", at)
    line = tail[start + len(_DATA) : end if end >= 0 else len(tail)]
    try:
        value = json.loads(line).get(key)
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, dict) else None


@dataclass
class RelayOutcome:
    """What happened during one relayed stream.

    Attributes:
        first_chunk_at: ``time.monotonic()`` of the first upstream body chunk (TTFT), or None.
        timings: the final event's llama-server ``timings``, or None.
        usage: the last event's ``usage`` when there are no ``timings``, or None.
        error: the error sent to the client as an event, or None when the stream completed.
        repairs: repair kinds applied to this stream (each once).
    """

    first_chunk_at: float | None = None
    timings: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    error: ApiError | None = None
    repairs: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class StreamFlavor:
    """How one API's SSE stream ends and carries errors.

    Attributes:
        done: the terminator added when a stream ends without it (None: the API has none).
        end_marker: bytes that only the final chunk of a completed stream contains.
        error_event: one SSE event carrying an ``ApiError`` in the API's shape.
    """

    done: bytes | None
    end_marker: bytes
    error_event: Callable[[ApiError], bytes]

    def is_end(self, body: bytes) -> bool:
        """Whether ``body`` (what is about to be sent) carries the stream's end."""
        return body.endswith(DONE) if self.end_marker is DONE else self.end_marker in body


#: OpenAI chat and completion streams: ``data: [DONE]`` ends them.
OPENAI_SSE = StreamFlavor(DONE, DONE, error_event)


class _EventRewriter:
    """Cuts chunks into SSE events and passes the ones that may change through a ``StreamRepair``."""

    def __init__(self, repair: Any, repairs: list[str]) -> None:
        self.repair = repair
        self.repairs = repairs
        self.pending = b""
        self.saw_done = False

    def feed(self, chunk: bytes) -> bytes:
        """Return the bytes to send for ``chunk`` (complete events only; a partial one waits)."""
        if not self.pending and chunk.endswith(b"\n\n") and not self.repair.needs_parse(chunk):
            # Whole events none of which can change (the check holds for every substring): pass
            # the chunk itself, uncopied. Nothing is held, so a [DONE] here needs nothing first.
            if chunk.endswith(DONE):
                self.saw_done = True
            return chunk
        buf = self.pending + chunk if self.pending else chunk
        cut = buf.rfind(b"\n\n")
        if cut < 0:
            self.pending = buf
            return b""
        self.pending = buf[cut + 2 :]
        out = [self._event(ev) for ev in buf[: cut + 2].split(b"\n\n")[:-1]]
        return b"".join(out)

    def finish(self) -> bytes:
        """Bytes still owed at the end: a partial event, and text the repair held back."""
        out = self.pending
        self.pending = b""
        if out and not out.endswith(b"\n\n"):
            out += b"\n\n"  # an unterminated last event: end it so what follows parses
        if not self.saw_done:
            out += self._held()
        return out

    def _held(self) -> bytes:
        last = self.repair.finish()
        return encode_event(last) if last is not None else b""

    def _event(self, event: bytes) -> bytes:
        head, sep, data = event.partition(b"\n")
        if sep and head.startswith(b"event:") and b"\n" not in data:
            return head + sep + self._event(data)  # a named event (Anthropic, Responses): its one data line
        if not event.startswith(_DATA) or b"\n" in event:
            return event + b"\n\n"  # comments (":" pings), named events: not ours to touch
        payload = event[len(_DATA) :]
        if payload == b"[DONE]":
            self.saw_done = True
            return self._held() + DONE
        if not self.repair.needs_parse(payload):
            return event + b"\n\n"
        try:
            chunk = json.loads(payload)
        except ValueError:
            return event + b"\n\n"
        if not isinstance(chunk, dict) or "error" in chunk:
            return event + b"\n\n"
        fixed, kinds = self.repair.repair(chunk)
        for kind in kinds:
            if kind not in self.repairs:
                self.repairs.append(kind)
        if fixed is chunk:
            return event + b"\n\n"
        return encode_event(fixed)


class StreamCodec(Protocol):
    """Turns one upstream SSE body into the client's stream (an adapter's ``codec``).

    ``feed`` gets each upstream chunk and returns the bytes to send now (b"" to send nothing);
    ``is_end`` says whether bytes about to be sent carry the stream's last event (they are held
    for the final send, after the accounting); ``close`` returns what is still owed once the
    upstream body ended (``tail``: its last bytes) or failed (``error``); ``repairs`` lists the
    repair kinds applied (each once).
    """

    repairs: list[str]

    def feed(self, chunk: bytes) -> bytes: ...

    def is_end(self, body: bytes) -> bool: ...

    def close(self, tail: bytes, error: ApiError | None) -> bytes: ...


class SseCodec:
    """An SSE stream passed on as SSE (OpenAI, Anthropic, Responses, llama-server's own).

    Args:
        flavor: how the API's stream ends and carries errors.
        repair: an ``orchestrator.serve.repair.stream.StreamRepair``-like object when a repair can
            apply, else None: then every chunk is passed on as it came, uncopied.
    """

    def __init__(self, flavor: StreamFlavor, repair: Any = None) -> None:
        self.flavor = flavor
        self.repairs: list[str] = []
        self._rewriter = _EventRewriter(repair, self.repairs) if repair is not None else None
        if self._rewriter is not None:
            self.feed = self._rewriter.feed  # type: ignore[method-assign]

    def feed(self, chunk: bytes) -> bytes:
        return chunk

    def is_end(self, body: bytes) -> bool:
        return self.flavor.is_end(body)

    def close(self, tail: bytes, error: ApiError | None) -> bytes:
        """Held text, then (a stream that did not complete) an error event and the terminator."""
        flavor, rewriter = self.flavor, self._rewriter
        closing = rewriter.finish() if rewriter is not None else b""
        if flavor.end_marker is DONE:
            completed = rewriter.saw_done if rewriter is not None else tail.endswith(DONE)
        else:
            completed = flavor.end_marker in tail
        if not completed:
            # What the client got so far must end on an event boundary before we add events.
            sent_end = closing or (b"" if rewriter is not None else tail)
            if sent_end and not sent_end.endswith(b"\n\n"):
                closing += b"\n\n"
            if error is not None:
                closing += flavor.error_event(error)
            closing += flavor.done or b""
        return closing


async def relay(
    chunks: AsyncGenerator[bytes, None],
    send: Send,
    codec: StreamCodec,
    *,
    before_last_send: Callable[[RelayOutcome], None] | None = None,
    map_error: Callable[[Exception], ApiError] = to_api_error,
) -> RelayOutcome:
    """Relay an upstream SSE body to the client through ``codec``; the response head must already be sent.

    Args:
        chunks: the upstream body chunks (``Upstream.iter_body``), raising ``UpstreamTimeout`` or
            ``TransportFailure`` when the upstream fails.
        send: the ASGI send callable.
        codec: the API's stream shape (:class:`SseCodec`, or an adapter's own).
        before_last_send: called with the outcome just before the final (``more_body=False``)
            send, which carries the stream's end (``data: [DONE]``): the caller accounts the
            response (metrics, timings) before the client can see the end of it, and can tell a
            completed response from a client disconnect.
        map_error: turns the upstream failure into the client's error (default ``to_api_error``).

    Returns:
        A :class:`RelayOutcome`. Transport failures do not raise: they end the stream with an
        error event. Cancellation (client gone) propagates.
    """
    outcome = RelayOutcome()
    prev = last = held = b""
    feed, is_end = codec.feed, codec.is_end
    try:
        async with contextlib.aclosing(chunks):
            async for chunk in chunks:
                if outcome.first_chunk_at is None:
                    outcome.first_chunk_at = time.monotonic()
                prev, last = last, chunk
                body = feed(chunk)
                if is_end(body):
                    held = body  # the end goes out with the final send, after the accounting
                elif body:
                    await send({"type": "http.response.body", "body": held + body, "more_body": True})
                    held = b""
    except UPSTREAM_FAILURES as exc:
        outcome.error = map_error(exc)
    tail = prev + last  # small: only the stream's last two chunks are joined, once
    closing = codec.close(tail, outcome.error)
    outcome.repairs = codec.repairs
    outcome.timings = final_timings(tail)
    outcome.usage = final_usage(tail) if outcome.timings is None else None
    if before_last_send is not None:
        before_last_send(outcome)
    await send({"type": "http.response.body", "body": held + closing, "more_body": False})
    return outcome
