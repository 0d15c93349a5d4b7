"""``GET /v1/responses`` with ``Upgrade: websocket``: Codex's WebSocket transport, answered 426.

Codex (0.171, built-in ``openai`` provider or a provider without ``supports_websockets = false``)
opens a WebSocket on ``GET /v1/responses`` before its first turn. This endpoint speaks Responses
over HTTP only. Codex falls back to HTTP at once only on ``426 Upgrade Required``; any other
refusal (a 405, a 404) it retries as a lost connection ("Reconnecting 1/5 ... 5/5", about 6.6 s)
before it falls back. So the upgrade is answered 426 at once, after the same key check as every
route (401 first: a wrong key is what a client must hear about), in the OpenAI error shape. A
``GET`` without the upgrade stays a 405: nothing is served there.

uvicorn runs with ``ws="none"`` (``serve.http.limits.uvicorn_config``), so an upgrade request
reaches the app as a plain HTTP request and this route answers it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import Request

from orchestrator.errors import ApiError

if TYPE_CHECKING:
    from fastapi import FastAPI


PATH = "/v1/responses"


def wants_websocket(request: Request) -> bool:
    """Whether ``request`` asks to upgrade to a WebSocket (``Upgrade: websocket``, any case)."""
    return "websocket" in request.headers.get("upgrade", "").lower()


def add_routes(app: FastAPI) -> None:
    """Register ``GET /v1/responses`` on ``app`` (behind the key: ``orchestrator.serve.routes``)."""

    async def upgrade(request: Request) -> None:
        if not wants_websocket(request):
            raise ApiError(405, f"GET {PATH} is not served; POST a response request", code="method_not_allowed")
        raise ApiError(
            426,
            "WebSocket transport is not served here; send the request as HTTP POST /v1/responses "
            "(Codex: supports_websockets = false in the provider)",
            code="websocket_not_supported",
        )

    app.add_api_route(PATH, upgrade, methods=["GET"])
