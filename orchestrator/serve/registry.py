"""Every adapter the endpoint serves, and which API a path belongs to.

``ADAPTERS`` is the one list the app registers POST routes from. Paths the proxy answers itself
(listings, the console, 404s) still owe a client its API's error shape: :func:`for_path` finds
the API by the longest matching path prefix among the adapters (``/v1/messages...`` Anthropic,
``/api/...`` Ollama, else OpenAI).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from orchestrator.errors import ApiError
from orchestrator.serve.adapters.base import Adapter
from orchestrator.serve.anthropic.adapter import CountTokens, Messages
from orchestrator.serve.llama.adapter import native_routes
from orchestrator.serve.ollama.adapter import ollama_routes
from orchestrator.serve.ollama.listings import OllamaApi
from orchestrator.serve.openai.adapter import ChatCompletions, Completions, Embeddings
from orchestrator.serve.responses import stored, websocket
from orchestrator.serve.responses.adapter import Compact, InputTokens, Responses

if TYPE_CHECKING:
    from fastapi import FastAPI

    from orchestrator.serve.forward import Forwarder

ADAPTERS: tuple[Adapter, ...] = (
    ChatCompletions(),
    Completions(),
    Embeddings(),
    Messages(),
    CountTokens(),
    Responses(),
    InputTokens(),
    Compact(),
    *native_routes(),
    *ollama_routes(),
)

_OPENAI = Adapter()
# the API families whose error shape differs from OpenAI's, by the path prefix their adapters declare
_PREFIXES: tuple[tuple[str, Adapter], ...] = tuple(
    sorted(((a.error_prefix, a) for a in ADAPTERS if a.error_prefix), key=lambda pa: -len(pa[0]))
)
_BY_PATH = {a.path: a for a in ADAPTERS}


def adapter_for(path: str) -> Adapter | None:
    """The adapter serving ``POST path``, or None."""
    return _BY_PATH.get(path)


_BY_HEADER = tuple((a.client_header, a) for a in ADAPTERS if a.client_header is not None)


def for_path(path: str, headers: Mapping[str, str] | None = None) -> Adapter:
    """The adapter whose API ``path`` belongs to (by prefix), else the one whose clients' own
    header the request carries, else OpenAI's: for its error shape."""
    found = next((adapter for prefix, adapter in _PREFIXES if path.startswith(prefix)), None)
    if found is None and headers is not None:
        found = next((adapter for header, adapter in _BY_HEADER if header in headers), None)
    return found or _OPENAI


def error_body(path: str, err: ApiError, headers: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``err`` as the JSON body the client of ``path`` (sending ``headers``) expects."""
    return for_path(path, headers).error_body(err)


def served(off: set[str]) -> tuple[Adapter, ...]:
    """The adapters of every API family not in ``off`` (``server.ollama_api: false`` -> ``{"ollama"}``)."""
    return tuple(a for a in ADAPTERS if a.api not in off)


def add_api_routes(app: FastAPI, fwd: Forwarder, off: set[str]) -> None:
    """Each API's routes besides its forwarded POSTs: Ollama's listings, Responses' stored responses
    and its WebSocket upgrade (426)."""
    if "ollama" not in off:
        OllamaApi(fwd).add_to(app)
    websocket.add_routes(app)
    stored.add_routes(app, fwd.responses_store)
