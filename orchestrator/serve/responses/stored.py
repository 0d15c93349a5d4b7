"""``GET``/``DELETE``/``POST /v1/responses/{id}``: nothing is stored here (``store: true`` is refused),
so retrieving, deleting or cancelling a stored response is a 404 that says what to do instead."""

from __future__ import annotations

from fastapi import FastAPI, Request

from orchestrator.errors import ApiError


async def not_stored(request: Request, response_id: str) -> None:
    """Retrieving, deleting or cancelling a stored response."""
    raise ApiError(
        404,
        f"response {response_id!r} is not stored: this server keeps no responses (store: true is refused); "
        "send the whole conversation in 'input'",
        code="response_not_stored",
    )


def add_routes(app: FastAPI) -> None:
    """Register the stored-response routes on ``app``."""
    app.add_api_route("/v1/responses/{response_id:path}", not_stored, methods=["GET", "DELETE", "POST"])
