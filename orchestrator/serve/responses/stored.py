"""Responses ``store: true``: a bounded store of responses, for ``previous_response_id`` and
``GET``/``DELETE /v1/responses/{id}``.

Clients send ``store: true`` by default (the ``openai`` SDK's Responses examples, the Codex app)
and continue a conversation with ``previous_response_id`` instead of sending it again. llama-server
keeps nothing (it refuses ``previous_response_id``), so the endpoint keeps each stored response
here: the response object as the client got it, and the whole conversation before it (its
``input``, with the turns of the response it continued already in front).

- **Continuing** (``Responses.recall``): a request with ``previous_response_id`` gets that stored
  conversation, then the stored response's ``output`` items, then its own ``input``, as one
  ``input``; the stored response's model serves it when the request names none. The prompt the
  template renders then begins with exactly what the earlier turn's slot holds, so only the new
  turn is processed (``instructions`` are the request's own, as on OpenAI's API).
- **Bounds** (``server.responses_store``): ``max_bytes`` of responses (their JSON), the oldest
  dropped first; each one expires ``ttl`` seconds after it was stored. ``max_bytes: 0`` stores
  nothing (the answer then says ``store: false``).
- **Persistence**: one JSON file per response in ``<state folder>/responses/`` (``paths.state_dir``),
  written atomically, read back when the endpoint starts, so a restart keeps the conversations;
  expired and unreadable files are removed.
- **Routes** (behind the API keys): ``GET /v1/responses/{id}`` (the response),
  ``GET /v1/responses/{id}/input_items`` (its input, as a list), ``DELETE /v1/responses/{id}``.
  An unknown or expired id is a 404 ``response_not_found`` in OpenAI's shape; ``POST
  /v1/responses/{id}/cancel`` is a 400 for a stored response (none runs in the background here).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from orchestrator.errors import ApiError

if TYPE_CHECKING:
    from orchestrator.config.schema import ResponsesStoreConfig

log = logging.getLogger(__name__)
# an id this store hands out and reads back: llama-server's "resp_" + letters and digits
_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


@dataclass
class Stored:
    """One stored response: ``response`` as the client got it, ``input`` the whole conversation
    before it (input items), the ``model`` that answered, when it was stored (wall clock) and
    its size in bytes (its JSON)."""

    response: dict[str, Any]
    input: list[Any]
    model: str
    created: float
    size: int = 0

    def conversation(self) -> list[Any]:
        """The input items of a request that continues this response: its conversation, then its output."""
        output = self.response.get("output")
        return [*self.input, *(output if isinstance(output, list) else [])]

    def as_json(self) -> dict[str, Any]:
        return {"response": self.response, "input": self.input, "model": self.model, "created": self.created}


def input_items(value: Any) -> list[Any]:
    """A request's ``input`` as a list of items (a string is one user message)."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


class ResponseStore:
    """The stored responses of one endpoint (the module docstring).

    Args:
        folder: where each response is persisted (one file per id); None keeps them in memory only.
        settings: the current ``server.responses_store`` (read on every use: a reload applies).
        clock: wall-clock seconds (tests pass their own).
    """

    def __init__(
        self,
        folder: Path | None,
        settings: Callable[[], ResponsesStoreConfig],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.folder, self.settings, self.clock = folder, settings, clock
        self._items: OrderedDict[str, Stored] = OrderedDict()
        self._bytes = 0
        self._load()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, response: dict[str, Any], conversation: list[Any], model: str) -> bool:
        """Keep ``response`` (with ``conversation``, the input items before it, and its ``model``).
        Returns whether it was kept (not when it alone is larger than ``max_bytes``)."""
        rid = response.get("id")
        if not isinstance(rid, str) or not _ID.match(rid):
            return False
        item = Stored(response, conversation, model, self.clock())
        data = json.dumps(item.as_json(), ensure_ascii=False, separators=(",", ":")).encode()
        item.size = len(data)
        if item.size > self.settings().max_bytes:
            return False
        self._drop(rid)
        self._items[rid] = item
        self._bytes += item.size
        self._write(rid, data)
        self._bound()
        return True

    def get(self, rid: str) -> Stored | None:
        """The stored response ``rid``, or None when unknown or expired."""
        self._expire()
        return self._items.get(rid)

    def delete(self, rid: str) -> bool:
        """Forget ``rid``; whether it was stored."""
        self._expire()
        return self._drop(rid)

    def _drop(self, rid: str) -> bool:
        item = self._items.pop(rid, None)
        if item is None:
            return False
        self._bytes -= item.size
        if self.folder is not None:
            with contextlib.suppress(OSError):
                (self.folder / f"{rid}.json").unlink()
        return True

    def _expire(self) -> None:
        deadline = self.clock() - self.settings().ttl
        while self._items and next(iter(self._items.values())).created < deadline:  # oldest first
            self._drop(next(iter(self._items)))

    def _bound(self) -> None:
        self._expire()
        cap = self.settings().max_bytes
        while self._items and self._bytes > cap:
            self._drop(next(iter(self._items)))

    def _write(self, rid: str, data: bytes) -> None:
        """Persist one response atomically (a temporary file renamed): a crash leaves the old file
        or the new one, never half of one. A folder that cannot be written keeps it in memory only."""
        if self.folder is None:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self.folder / f"{rid}.json")
        except OSError as err:
            log.warning("stored response %s kept in memory only: %s", rid, err)

    def _load(self) -> None:
        """Read back the responses a previous run stored, oldest first; drop expired and unreadable ones."""
        if self.folder is None or not self.folder.is_dir():
            return
        loaded = []
        for path in self.folder.glob("*.json"):
            try:
                raw = path.read_bytes()
                obj = json.loads(raw)
                item = Stored(obj["response"], obj["input"], obj["model"], float(obj["created"]), len(raw))
            except (OSError, ValueError, KeyError, TypeError):
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            loaded.append((item.created, path.stem, item))
        for _, rid, item in sorted(loaded, key=lambda t: t[0]):
            self._items[rid] = item
            self._bytes += item.size
        self._bound()


def not_found(rid: str, param: str | None = None) -> ApiError:
    """The 404 for an id that is not stored (never was, expired, deleted, or evicted)."""
    return ApiError(
        404,
        f"response {rid[:128]!r} is not stored here (never stored with store: true, expired, deleted or evicted); "
        "send the whole conversation in 'input'",
        param=param,
        code="response_not_found",
    )


def add_routes(app: FastAPI, store: ResponseStore) -> None:
    """Register the stored-response routes on ``app`` (behind the key: ``orchestrator.serve.routes``)."""

    def stored(request: Request, rid: str) -> Stored:
        item = store.get(rid)
        if item is None:
            raise not_found(rid)
        return item

    async def retrieve(request: Request, response_id: str) -> JSONResponse:
        return JSONResponse(stored(request, response_id).response)

    async def input_list(request: Request, response_id: str) -> JSONResponse:
        items = stored(request, response_id).input
        ids = [i.get("id") for i in items if isinstance(i, dict)]
        page = {"object": "list", "data": items, "first_id": ids[0] if ids else None,
                "last_id": ids[-1] if ids else None, "has_more": False}  # fmt: skip
        return JSONResponse(page)

    async def delete(request: Request, response_id: str) -> JSONResponse:
        stored(request, response_id)
        store.delete(response_id)
        return JSONResponse({"id": response_id, "object": "response", "deleted": True})

    async def cancel(request: Request, response_id: str) -> None:
        stored(request, response_id)
        raise ApiError(400, "only background responses can be cancelled; this one is complete", param="response_id")

    async def other(request: Request, response_id: str) -> None:
        raise not_found(response_id)

    app.add_api_route("/v1/responses/{response_id}/input_items", input_list, methods=["GET"])
    app.add_api_route("/v1/responses/{response_id}/cancel", cancel, methods=["POST"])
    app.add_api_route("/v1/responses/{response_id}", retrieve, methods=["GET"])
    app.add_api_route("/v1/responses/{response_id}", delete, methods=["DELETE"])
    app.add_api_route("/v1/responses/{response_id:path}", other, methods=["GET", "DELETE", "POST"])
