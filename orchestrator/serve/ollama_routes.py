"""The Ollama API routes: ``GET /api/tags``, ``/api/ps``, ``/api/version``, ``POST /api/show``,
``/api/chat``, ``/api/generate``, ``/api/embed``.

Translation lives in ``orchestrator.serve.ollama``; here each request takes the same path as an
OpenAI one: API key, body limit and ``Content-Encoding``, routing by model (``demo:latest`` names
``demo``), the chat route's repair and checks (``api_routes.prepare_body``: thinking default,
structured output, drafting off for log probabilities), a serving replica (held while loading),
metrics (endpoint ``ollama_chat``, ``ollama_generate``, ``ollama_embed``) and llama-server's own
route. Streams are NDJSON (``application/x-ndjson``), one object per line; a failure mid-stream
is one ``{"error": ...}`` line, as Ollama sends. Errors before the answer use Ollama's shape
``{"error": "message"}`` with the HTTP status (the app's handler renders it for ``/api/*``).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, cast

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from orchestrator.errors import ApiError
from orchestrator.serve import ollama, token_probs
from orchestrator.serve import response_repair as reasoning
from orchestrator.serve.api_routes import ROUTES, prepare_body
from orchestrator.serve.body import Receive, parse_body, read_body, to_utf8
from orchestrator.serve.body_codec import decode_body
from orchestrator.serve.forward import UPSTREAM_HEADERS, Forwarder
from orchestrator.serve.info import embeddings, model_size
from orchestrator.serve.structured import schema_error
from orchestrator.serve.upstream import UpstreamTimeout, from_upstream_status, to_api_error
from orchestrator.supervise.supervisor import SERVING

if TYPE_CHECKING:
    from orchestrator.config.schema import Config, ModelConfig

NDJSON = "application/x-ndjson"
_ROUTES = {r.path: r for r in ROUTES}
# Ollama's expires_at for a model that never unloads (no ttl, pinned, or keep_alive < 0)
_NEVER = "2318-08-17T00:00:00Z"


class OllamaApi:
    """The Ollama endpoints of one app, sharing the OpenAI routes' :class:`Forwarder`."""

    def __init__(self, fwd: Forwarder) -> None:
        self.fwd = fwd
        self.supervisor = fwd.router.supervisor

    @property
    def config(self) -> Config:
        """The running config's current snapshot: listings show a reload at once."""
        return self.fwd.config

    def add_to(self, app: FastAPI) -> None:
        """Register every Ollama route on ``app``."""
        app.add_api_route("/api/version", self.version, methods=["GET"])
        app.add_api_route("/api/tags", self.tags, methods=["GET"])
        app.add_api_route("/api/ps", self.ps, methods=["GET"])
        app.add_api_route("/api/show", self.show, methods=["POST"])
        app.add_api_route("/api/chat", self.chat, methods=["POST"])
        app.add_api_route("/api/generate", self.generate, methods=["POST"])
        app.add_api_route("/api/embed", self.embed, methods=["POST"])

    async def version(self, request: Request) -> JSONResponse:
        """``{"version": ...}``: the Ollama API version these routes follow."""
        return JSONResponse({"version": ollama.API_VERSION})

    async def tags(self, request: Request) -> JSONResponse:
        """Every configured model and alias, as Ollama lists local models."""
        self.fwd.keys.check(request.scope["headers"])
        return JSONResponse({"models": [self._entry(m, n) for m in self.config.models for n in (m.name, *m.aliases)]})

    async def ps(self, request: Request) -> JSONResponse:
        """The models with a serving replica (Ollama's "running models")."""
        self.fwd.keys.check(request.scope["headers"])
        running = [m for m in self.config.models if any(i.state in SERVING for i in self.supervisor.for_model(m.name))]
        models = [
            {
                **self._entry(m, m.name),
                "expires_at": self._expires_at(m.name),
                "size_vram": 0,
                "context_length": m.ctx_size // m.parallel,
            }
            for m in running
        ]
        return JSONResponse({"models": models})

    def _expires_at(self, name: str) -> str:
        """When the model unloads if it stays idle (its ttl or a client's keep_alive), RFC 3339 UTC."""
        managed = self.fwd.router.scheduler.models.get(name)
        ttl = managed.ttl(self.config.server) if managed is not None else None
        if managed is None or ttl is None:
            return _NEVER
        left = max(0.0, ttl - (time.monotonic() - managed.last_used))
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + left))

    def _keep_alive(self, model: Any, body: dict[str, Any]) -> float | None:
        """Apply a request's ``keep_alive`` to its model's idle time (the lifecycle's TTL)."""
        seconds = ollama.keep_alive_seconds(body.get("keep_alive"))
        if seconds is not None:
            self.fwd.router.scheduler.keep_alive(self.fwd.router.resolve(model).name, seconds)
        return seconds

    async def show(self, request: Request) -> JSONResponse:
        """One model's details and capabilities; 400 ``{"error": "model is required"}`` without a name
        (Ollama's answer), 404 ``{"error": ...}`` for an unknown name."""
        body = await self._body(request)
        name = body.get("model") or body.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ApiError(400, "model is required", param="model")
        model = self.fwd.router.resolve(ollama.model_name(name))
        size = model_size(model)
        caps = ["completion", "tools", "thinking"]
        if model.multimodal:
            caps.append("vision")
        if embeddings(model):
            caps.append("embedding")
        info = {"general.architecture": "qwen35moe", "qwen35moe.context_length": size["context_length"]}
        return JSONResponse(
            {
                "modelfile": "",
                "parameters": f"num_ctx {size['context_length']}",
                "template": "",
                "details": self._details(),
                "model_info": info,
                "capabilities": caps,
                "modified_at": ollama.now(),
            }
        )

    async def chat(self, request: Request) -> Response:
        """``POST /api/chat`` through ``/v1/chat/completions``."""
        started = time.monotonic()
        body = await self._body(request)
        oai = ollama.chat_request(body)
        self._keep_alive(oai.get("model"), body)
        return await self._forward("ollama_chat", "/v1/chat/completions", oai, started, generate=False)

    async def generate(self, request: Request) -> Response:
        """``POST /api/generate`` through ``/v1/chat/completions`` (or ``/v1/completions`` when ``raw``)."""
        started = time.monotonic()
        body = await self._body(request)
        path, oai = ollama.generate_request(body)
        keep_alive = self._keep_alive(oai.get("model"), body)
        if not body.get("prompt") and not body.get("images"):
            # Ollama's "load the model" request, or "unload it" with keep_alive 0
            model = self.fwd.router.resolve(oai["model"])
            if keep_alive != 0:
                (await self.fwd.router.acquire(model.name)).release()
            reason = "unload" if keep_alive == 0 else "load"
            return JSONResponse(
                {"model": model.name, "created_at": ollama.now(), "response": "", "done": True, "done_reason": reason}
            )
        return await self._forward("ollama_generate", path, oai, started, generate=True)

    async def embed(self, request: Request) -> Response:
        """``POST /api/embed`` through ``/v1/embeddings``."""
        started = time.monotonic()
        body = await self._body(request)
        oai = ollama.embed_request(body)
        self._keep_alive(oai.get("model"), body)
        return await self._forward("ollama_embed", "/v1/embeddings", oai, started, generate=False)

    async def _body(self, request: Request) -> dict[str, Any]:
        headers = request.scope["headers"]
        self.fwd.keys.check(headers)
        settings = self.fwd.settings()
        raw = await read_body(headers, cast("Receive", request.receive), settings.max_body, settings.body_timeout)
        raw = to_utf8(decode_body(headers, raw, settings.max_body), headers)
        return parse_body(raw, request.scope["path"], settings.limits)

    def _entry(self, model: ModelConfig, name: str) -> dict[str, Any]:
        size = 0
        for inst in self.supervisor.for_model(model.name)[:1]:
            try:
                size = inst.spec.gguf.stat().st_size
            except OSError:
                size = 0
        return {
            "name": name,
            "model": name,
            "modified_at": ollama.now(),
            "size": size,
            "digest": hashlib.sha256(name.encode()).hexdigest(),
            "details": self._details(),
        }

    @staticmethod
    def _details() -> dict[str, Any]:
        return {"format": "gguf", "family": "qwen35moe", "families": ["qwen35moe"]}

    async def _forward(self, kind: str, path: str, oai: dict[str, Any], started: float, *, generate: bool) -> Response:
        fwd = self.fwd
        model = fwd.router.resolve(oai.get("model"))
        mm = fwd.metrics.model(model.name)
        status = 500
        instance = None
        lease = None
        handed = False  # a stream releases the replica itself when it ends
        try:
            plan = prepare_body(_ROUTES[path], oai, model, fwd.settings().policy(model.name))
            for repair in plan.repairs:
                mm.repair(repair)
            if plan.drafting_off is not None:
                mm.drafting_off(plan.drafting_off)
            body = plan.body if plan.body is not None else oai
            lease = await fwd.router.acquire(model.name)
            instance = lease.instance  # in flight on it: counted by the lease
            mm.in_flight.inc()
            upstream = fwd.pool.get(instance.base_url or "", instance.name)
            content = json.dumps(body, ensure_ascii=False).encode()
            response = await upstream.open("POST", path, content, UPSTREAM_HEADERS, on_retry=mm.retry)
            if response.status_code >= 400:
                detail = await upstream.read_body(response)
                await response.aclose()
                raise schema_error(from_upstream_status(response.status_code, detail), body)
            status = 200
            if body.get("stream"):
                handed = True
                lines = self._stream(upstream, response, model.name, (started, generate, plan.trim_top), lease, mm)
                return StreamingResponse(lines, media_type=NDJSON)
            try:
                data = json.loads(await upstream.read_body(response))
            finally:
                await response.aclose()
            if plan.trim_top:
                token_probs.trim(data)
            return JSONResponse(self._whole(data, path, model.name, started, generate, plan.thinking, mm))
        except (UpstreamTimeout, httpx.TransportError) as exc:
            raise to_api_error(exc) from None
        except ApiError as err:
            status = err.status
            raise
        finally:
            mm.request(kind, status)
            if instance is not None and not handed:
                mm.in_flight.dec()
            if lease is not None and not handed:
                lease.release()

    @staticmethod
    def _whole(
        data: dict[str, Any], path: str, model: str, started: float, generate: bool, thinking: bool, mm: Any
    ) -> dict[str, Any]:
        timings = data.get("timings")
        if isinstance(timings, dict):
            mm.timings(timings)
        if path == "/v1/embeddings":
            vectors = [d["embedding"] for d in data.get("data", [])]
            usage = data.get("usage") or {}
            return {"model": model, "embeddings": vectors, "prompt_eval_count": usage.get("prompt_tokens", 0)}
        if path == "/v1/chat/completions":
            data, _kinds = reasoning.repair_response(data, thinking=thinking)
        return ollama.answer(data, model, started, generate=generate)

    async def _stream(
        self, upstream: Any, response: httpx.Response, model: str, how: tuple[float, bool, bool], lease: Any, mm: Any
    ) -> AsyncIterator[bytes]:
        started, generate, trim_top = how
        translator = ollama.StreamTranslator(model, started, generate=generate)
        pending = b""
        try:
            async for chunk in upstream.iter_body(response):
                pending += chunk
                *events, pending = pending.split(b"\n\n")
                for event in events:
                    if not event.startswith(b"data: {"):
                        continue
                    obj = json.loads(event[len(b"data: ") :])
                    if "error" in obj:
                        yield ollama.error_line(ApiError(502, str(obj["error"].get("message", obj["error"]))))
                        return
                    if isinstance(obj.get("timings"), dict):
                        mm.timings(obj["timings"])
                    if trim_top:
                        token_probs.trim(obj)
                    for line in translator.feed(obj):
                        yield json.dumps(line, ensure_ascii=False).encode() + b"\n"
        except (UpstreamTimeout, httpx.TransportError) as exc:
            yield ollama.error_line(to_api_error(exc))
        finally:
            mm.in_flight.dec()
            lease.release()
            await response.aclose()
