"""Ollama's ``/api/chat``, ``/api/generate`` and ``/api/embed``, translated onto OpenAI routes.

The translations themselves are the pure ``orchestrator.serve.ollama.translate``; this adapter only picks
the internal route and shapes what comes back:

===================  =========================================  ===========================================
Ollama route         internal route                             answer
===================  =========================================  ===========================================
``/api/chat``        ``/v1/chat/completions`` (chat repair,     one JSON object, or NDJSON lines ending
                     reasoning repair, reasoning-only retry)    with ``"done": true``
``/api/generate``    the same chat; ``raw: true``:              ``response`` instead of ``message``
                     ``/v1/completions`` with the prompt as is
``/api/embed``       ``/v1/embeddings``                         ``{"model", "embeddings", ...}``
===================  =========================================  ===========================================

Everything else (routing, lease, peers, resend to the next replica, drafting statistics, TTFT,
disconnect, drain) is the per-request object's, as for every API. A request's ``keep_alive``
sets its model's idle time (the lifecycle's TTL); an ``/api/generate`` without a prompt only loads
the model (``done_reason: "load"``), or with ``keep_alive: 0`` unloads it once idle. A held
stream sends no SSE comments while its model loads (an NDJSON reader would choke on them).
Errors are ``{"error": "message"}`` with the HTTP status, and one such line inside a stream.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from orchestrator.errors import ApiError
from orchestrator.serve.adapters.base import Generation, Internal, parse_answer, stream_repairs
from orchestrator.serve.adapters.route import Request, Resend, Route
from orchestrator.serve.http.body import dump_body
from orchestrator.serve.ollama import shapes
from orchestrator.serve.ollama import translate as ollama
from orchestrator.serve.openai.adapter import CHAT, COMPLETIONS, EMBEDDINGS
from orchestrator.serve.streaming import sse_events

if TYPE_CHECKING:
    from orchestrator.serve.streaming import StreamCodec

OLLAMA_PREFIX = "/api/"
NDJSON_HEADERS: list[tuple[bytes, bytes]] = [(b"content-type", b"application/x-ndjson")]
_BY_PATH: dict[str, Route] = {CHAT.path: CHAT, COMPLETIONS.path: COMPLETIONS}
_DONE = b'"done": true'  # json.dumps' default separators; a quote inside text is always escaped


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode() + b"\n"


def idle_line(model: str, *, generate: bool) -> bytes:
    """An Ollama stream chunk with nothing in it: the keepalive of a waiting stream."""
    empty: dict[str, Any] = {"response": ""} if generate else {"message": {"role": "assistant", "content": ""}}
    return _line({"model": model, "created_at": ollama.now(), **empty, "done": False})


class NdjsonCodec:
    """An OpenAI SSE stream as Ollama's NDJSON lines (``orchestrator.serve.streaming.StreamCodec``).

    Every event is parsed (each becomes a line); the internal route's stream repair (reasoning
    split, candidate trim) runs first, and what it held back goes out before the final line. The
    stream always ends with one ``"done": true`` line (from the last usage or timings seen, also
    when llama-server put them on its last choice, as ``/v1/completions`` does), or one
    ``{"error": ...}`` line.
    """

    def __init__(self, translator: ollama.StreamTranslator, repair: Any) -> None:
        self.translator = translator
        self.repair = repair
        self.repairs: list[str] = []
        self._pending = b""
        self._stats: dict[str, Any] = {}  # usage and timings of the last chunk that had them
        self._flushed = False  # the repair's held text went out
        self._ended = False  # the done line or an error line went out

    def feed(self, chunk: bytes) -> bytes:
        events, self._pending = sse_events(self._pending, chunk)
        return b"".join(self._event(event) for event in events)

    def is_end(self, body: bytes) -> bool:
        return _DONE in body

    def close(self, tail: bytes, error: ApiError | None) -> bytes:
        out = self._event(self._pending.strip()) if self._pending.strip() else b""
        self._pending = b""
        if self._ended:
            return out
        if error is not None:
            self._ended = True
            return out + ollama.error_line(error)
        out += self._flush()
        if not self._ended:
            out += self._lines([self.translator.end(self._stats)])
        return out

    def _event(self, event: bytes) -> bytes:
        if not self._ended and event.startswith(b":"):  # llama-server's ping during a long prefill
            return idle_line(self.translator.model, generate=self.translator.generate)
        if self._ended or not event.startswith(b"data: "):
            return b""  # anything else, or anything after the last line
        payload = event[len(b"data: ") :]
        if payload == b"[DONE]":
            return self._flush()
        try:
            obj = json.loads(payload)
        except ValueError:
            return b""
        if not isinstance(obj, dict):
            return b""
        if "error" in obj:
            self._ended = True
            err = obj["error"]
            return ollama.error_line(ApiError(502, str(err.get("message", err) if isinstance(err, dict) else err)))
        for key in ("usage", "timings"):
            if isinstance(obj.get(key), dict):
                self._stats[key] = obj[key]
        out = b"" if obj.get("choices") else self._flush()  # held text before the final line
        if self.repair is not None and self.repair.needs_parse(payload):
            obj, kinds = self.repair.repair(obj)
            self.repairs.extend(k for k in kinds if k not in self.repairs)
        return out + self._lines(self.translator.feed(obj))

    def _flush(self) -> bytes:
        if self._flushed or self.repair is None:
            return b""
        self._flushed = True
        held = self.repair.finish()
        return self._lines(self.translator.feed(held)) if held is not None else b""

    def _lines(self, lines: list[dict[str, Any]]) -> bytes:
        if any(line.get("done") for line in lines):
            self._ended = True
        return b"".join(_line(line) for line in lines)


class OllamaAdapter(Generation):
    """What every Ollama route shares: error shape, NDJSON streams, ``keep_alive``."""

    path = "/api/chat"
    kind = "ollama_chat"
    shape = shapes.CHAT
    error_prefix = OLLAMA_PREFIX
    api = "ollama"
    stream_headers = NDJSON_HEADERS
    generate = False  # /api/generate's answer shape (``response``) instead of /api/chat's

    route: Route = CHAT

    def translate(self, body: dict[str, Any], raw: bytes) -> Internal:
        return Internal(CHAT.path, ollama.chat_request(body), CHAT)

    async def local(self, req: Request, client: dict[str, Any]) -> dict[str, Any] | None:
        """Apply the request's ``keep_alive`` to its model's idle time (the lifecycle's TTL)."""
        seconds = ollama.keep_alive_seconds(client.get("keep_alive"))
        if seconds is not None:
            req.keep_alive(seconds)
        return None

    def encode(self, req: Request, obj: dict[str, Any], data: bytes, *, changed: bool) -> bytes:
        return dump_body(ollama.answer(obj, req.model.name, req.started, generate=self.generate))

    def codec(self, req: Request, route: Route) -> StreamCodec:
        repair = stream_repairs(req, route)
        return NdjsonCodec(ollama.StreamTranslator(req.model.name, req.started, generate=self.generate), repair)

    def keepalive(self, req: Request, what: str) -> bytes:
        """An empty chunk (no text, ``done: false``): NDJSON has no comments, and Ollama's clients
        take such a line as no news."""
        return idle_line(req.model.name, generate=self.generate)

    def error_body(self, err: ApiError) -> dict[str, Any]:
        return {"error": ollama.error_message(err)}

    def stream_error(self, err: ApiError) -> bytes:
        return ollama.error_line(err)


class OllamaGenerate(OllamaAdapter):
    """``POST /api/generate``: a chat of ``system`` and ``prompt``, or with ``raw`` a completion."""

    path = "/api/generate"
    kind = "ollama_generate"
    shape = shapes.GENERATE
    generate = True

    def translate(self, body: dict[str, Any], raw: bytes) -> Internal:
        path, oai = ollama.generate_request(body)
        return Internal(path, oai, _BY_PATH[path])

    async def local(self, req: Request, client: dict[str, Any]) -> dict[str, Any] | None:
        """Without a prompt: Ollama's "load the model", or with ``keep_alive: 0`` "unload it"."""
        await super().local(req, client)
        if client.get("prompt") or client.get("images"):
            return None
        keep_alive = ollama.keep_alive_seconds(client.get("keep_alive"))
        if keep_alive != 0:
            await req.load()
        reason = "unload" if keep_alive == 0 else "load"
        return {
            "model": req.model.name,
            "created_at": ollama.now(),
            "response": "",
            "done": True,
            "done_reason": reason,
        }


class OllamaEmbed(OllamaAdapter):
    """``POST /api/embed`` through ``/v1/embeddings``."""

    path = "/api/embed"
    kind = "ollama_embed"
    shape = shapes.EMBED

    route = EMBEDDINGS

    def translate(self, body: dict[str, Any], raw: bytes) -> Internal:
        return Internal(EMBEDDINGS.path, ollama.embed_request(body), EMBEDDINGS)

    def whole(self, req: Request, data: bytes) -> bytes | Resend:
        obj = parse_answer(data) or {}
        vectors = [d["embedding"] for d in obj.get("data", []) if isinstance(d, dict)]
        usage = obj.get("usage") or {}
        return dump_body(
            {"model": req.model.name, "embeddings": vectors, "prompt_eval_count": usage.get("prompt_tokens", 0)}
        )


def ollama_routes() -> tuple[OllamaAdapter, ...]:
    """The Ollama routes forwarded to llama-server (its listings are ``orchestrator.serve.ollama.listings``)."""
    return (OllamaAdapter(), OllamaGenerate(), OllamaEmbed())
