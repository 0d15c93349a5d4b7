"""The Ollama API's listings: ``GET /api/tags``, ``/api/ps``, ``/api/version``, ``POST /api/show``.

``/api/chat``, ``/api/generate`` and ``/api/embed`` are forwarded like every API route (their
adapter is ``orchestrator.serve.ollama.adapter``). Each model is described with the
architecture its GGUF header names (``general.architecture``, read once per file). Errors use
Ollama's shape ``{"error": "message"}`` with the HTTP status (the app's handler renders it for
``/api/*``).
"""

from __future__ import annotations

import functools
import hashlib
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from orchestrator.errors import ApiError, UserError
from orchestrator.models.gguf_header import read_header
from orchestrator.serve.http.body import Receive, read_json
from orchestrator.serve.info import embeddings, model_size
from orchestrator.serve.ollama import translate as ollama
from orchestrator.serve.ollama.shapes import SHOW
from orchestrator.supervise.supervisor import SERVING

if TYPE_CHECKING:
    from orchestrator.config.schema import Config, ModelConfig
    from orchestrator.serve.forward import Forwarder

# Ollama's expires_at for a model that never unloads (no ttl, pinned, or keep_alive < 0)
_NEVER = "2318-08-17T00:00:00Z"
_NEVER_EPOCH = datetime(2318, 8, 17, tzinfo=UTC).timestamp()


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
        """Register the Ollama listings on ``app``."""
        app.add_api_route("/api/version", self.version, methods=["GET"])
        app.add_api_route("/api/tags", self.tags, methods=["GET"])
        app.add_api_route("/api/ps", self.ps, methods=["GET"])
        app.add_api_route("/api/show", self.show, methods=["POST"])

    async def version(self, request: Request) -> JSONResponse:
        """``{"version": ...}``: the Ollama API version these routes follow."""
        return JSONResponse({"version": ollama.API_VERSION})

    async def tags(self, request: Request) -> JSONResponse:
        """Every configured model and alias, as Ollama lists local models."""
        return JSONResponse({"models": [self._entry(m, n) for m in self.config.models for n in (m.name, *m.aliases)]})

    async def ps(self, request: Request) -> JSONResponse:
        """The models with a serving replica (Ollama's "running models")."""
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
        at = time.time() + left
        # a ttl of years (models.yaml, a client's keep_alive) is beyond what gmtime can write
        return _NEVER if at >= _NEVER_EPOCH else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))

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
        arch = self._architecture(model)
        info: dict[str, Any] = {"general.architecture": arch} if arch else {}
        info[f"{arch or 'general'}.context_length"] = size["context_length"]
        return JSONResponse(
            {
                "modelfile": "",
                "parameters": f"num_ctx {size['context_length']}",
                "template": "",
                "details": self._details(model),
                "model_info": info,
                "capabilities": caps,
                "modified_at": ollama.now(),
            }
        )

    async def _body(self, request: Request) -> dict[str, Any]:
        headers = request.scope["headers"]
        settings = self.fwd.settings()
        body, _raw = await read_json(headers, cast("Receive", request.receive), settings, SHOW)
        return body

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
            "details": self._details(model),
        }

    def _architecture(self, model: ModelConfig) -> str | None:
        """The architecture the model's GGUF header names (``qwen35moe``, ``llama`` ...), or None."""
        for inst in self.supervisor.for_model(model.name)[:1]:
            try:
                return _architecture_of(inst.spec.gguf, inst.spec.gguf.stat().st_mtime_ns)
            except OSError:
                return None
        return None

    def _details(self, model: ModelConfig) -> dict[str, Any]:
        arch = self._architecture(model)
        return {"format": "gguf", **({"family": arch, "families": [arch]} if arch else {})}


@functools.lru_cache(maxsize=128)
def _architecture_of(gguf: Path, _mtime_ns: int) -> str | None:
    """``general.architecture`` of ``gguf`` (cached per file version: ``_mtime_ns``)."""
    try:
        arch = read_header(gguf, keep_string_arrays=()).metadata.get("general.architecture")
    except (OSError, UserError, ValueError):
        return None
    return arch if isinstance(arch, str) else None
