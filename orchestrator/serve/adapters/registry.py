"""Every adapter the endpoint serves, and which API a path belongs to.

``ADAPTERS`` is the one list the app registers POST routes from. Paths the proxy answers itself
(listings, the console, 404s) still owe a client its API's error shape: :func:`for_path` finds
the API by the longest matching path prefix among the adapters (``/v1/messages...`` Anthropic,
``/api/...`` Ollama, else OpenAI).
"""

from __future__ import annotations

from typing import Any

from orchestrator.errors import ApiError
from orchestrator.serve.adapters.anthropic_messages import CountTokens, Messages
from orchestrator.serve.adapters.base import Adapter
from orchestrator.serve.adapters.llama_native import native_routes
from orchestrator.serve.adapters.ollama_api import OLLAMA_PREFIX, OllamaAdapter, ollama_routes
from orchestrator.serve.adapters.openai import ChatCompletions, Completions, Embeddings
from orchestrator.serve.adapters.openai_responses import InputTokens, Responses

ADAPTERS: tuple[Adapter, ...] = (
    ChatCompletions(),
    Completions(),
    Embeddings(),
    Messages(),
    CountTokens(),
    Responses(),
    InputTokens(),
    *native_routes(),
    *ollama_routes(),
)

_OPENAI = Adapter()
# the API families whose error shape differs from OpenAI's, by the prefix of their paths
_PREFIXES: tuple[tuple[str, Adapter], ...] = (
    (Messages.path, Messages()),
    (OLLAMA_PREFIX, OllamaAdapter()),
)


def for_path(path: str) -> Adapter:
    """The adapter whose API ``path`` belongs to, for its error shape."""
    return next((adapter for prefix, adapter in _PREFIXES if path.startswith(prefix)), _OPENAI)


def error_body(path: str, err: ApiError) -> dict[str, Any]:
    """``err`` as the JSON body the client of ``path`` expects."""
    return for_path(path).error_body(err)


def served_routes() -> list[str]:
    """Every route the endpoint serves, for the 404 message and the README."""
    posts = [f"POST {a.path}" for a in ADAPTERS if not a.path.startswith(OLLAMA_PREFIX)]
    gets = [
        "GET /v1/models",
        "GET /health",
        "GET /status",
        "GET /metrics",
        "POST /models/restart",
        "GET /ui/ (console)",
    ]
    ollama = [
        "GET /api/tags",
        "GET /api/ps",
        "GET /api/version",
        "POST /api/show",
        "POST /api/chat",
        "POST /api/generate",
        "POST /api/embed",
    ]
    return posts + gets + ollama
