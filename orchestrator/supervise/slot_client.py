"""llama-server's slot routes, for saving, restoring and warming prompt caches.

Routes of the pin (tools/server/server.cpp, server-context.cpp): ``GET /slots`` (one object per
slot), ``POST /slots/{id}?action=save|restore|erase`` with ``{"filename": NAME}`` (a bare name
inside ``--slot-save-path``), and ``POST /completion`` with ``id_slot`` and ``cache_prompt`` to
fill or probe one slot. A save or restore of a busy slot waits until the slot is free.
"""

from __future__ import annotations

import copy
from typing import Any, Self

import httpx

SLOT_TIMEOUT = 600.0  # s: saving or restoring a 20,000-token prompt of a large model reads/writes GB
# s: listing the slots is answered between two batches of the server's loop; a child that does not
# answer in this long is frozen (SIGSTOP, a hung GPU), and a stop must not wait SLOT_TIMEOUT for it.
# The prompt cache lists with at least server.timeouts.stall: a model whose one batch is slower
# than this has that raised (serve/cache/prompt_cache.py)
LIST_TIMEOUT = 30.0


class SlotError(Exception):
    """A slot route answered with an error (the server's message) or not at all."""


class SlotClient:
    """The slot routes of any number of llama-servers (by base URL). Each call has its own
    connection: the calls are rare (loads and stops) and may come after the proxy's pools closed."""

    def __init__(self, timeout: float = SLOT_TIMEOUT, list_timeout: float | None = None) -> None:
        self._timeout = timeout
        self._list_timeout = list_timeout  # None: LIST_TIMEOUT (read per call)
        self._auth: httpx.Auth | None = None

    def for_child(self, auth: httpx.Auth | None) -> Self:
        """This client for one child: its calls carry ``auth`` (the instance's ``ChildLock.auth``)."""
        bound = copy.copy(self)
        bound._auth = auth
        return bound

    def _client(self) -> httpx.AsyncClient:
        # verify=False: the children speak plain HTTP on loopback, and httpx's default loads the
        # CA bundle into a new SSL context, about 40 ms on the event loop per client: an idle save
        # of 8 slots froze every stream for a third of a second
        return httpx.AsyncClient(trust_env=False, timeout=self._timeout, auth=self._auth, verify=False)

    async def _post(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            async with self._client() as client:
                resp = await client.post(url, json=body)
            data = resp.json()
        except (httpx.HTTPError, ValueError) as err:
            raise SlotError(f"{url}: {type(err).__name__}: {err}") from None
        if resp.status_code != 200 or not isinstance(data, dict):
            message = data.get("error", {}).get("message") if isinstance(data, dict) else None
            raise SlotError(f"{url}: HTTP {resp.status_code}: {message or str(data)[:200]}")
        return data

    async def slots(self, base_url: str) -> list[dict[str, Any]]:
        """``GET /slots``: one object per slot (``id``, ``n_ctx``, ``is_processing``, ...)."""
        try:
            async with self._client() as client:
                wait = LIST_TIMEOUT if self._list_timeout is None else self._list_timeout
                resp = await client.get(f"{base_url}/slots", timeout=min(self._timeout, wait))
            data = resp.json()
        except (httpx.HTTPError, ValueError) as err:
            raise SlotError(f"{base_url}/slots: {type(err).__name__}: {err}") from None
        if resp.status_code != 200 or not isinstance(data, list):
            raise SlotError(f"{base_url}/slots: HTTP {resp.status_code}")
        return [s for s in data if isinstance(s, dict)]

    async def action(self, base_url: str, slot: int, action: str, filename: str | None = None) -> dict[str, Any]:
        """``POST /slots/{slot}?action=...``. Save answers ``n_saved`` (tokens) and ``n_written``
        (bytes), restore ``n_restored`` and ``n_read``; both carry ``timings`` in ms.

        Raises:
            SlotError: the server refused (no such slot, no ``--slot-save-path``, a file it
                cannot read: "Unable to restore slot: ...") or did not answer.
        """
        body = {"filename": filename} if filename is not None else {}
        return await self._post(f"{base_url}/slots/{slot}?action={action}", body)

    async def fill(self, base_url: str, slot: int, tokens: list[int]) -> dict[str, Any]:
        """Process ``tokens`` into slot ``slot`` without generating (``n_predict`` 0); returns
        the response, whose ``timings`` say how many tokens came from the cache (``cache_n``)
        and how many were computed (``prompt_n``, ``prompt_ms``)."""
        body = {"prompt": tokens, "n_predict": 0, "id_slot": slot, "cache_prompt": True, "temperature": 0}
        return await self._post(f"{base_url}/completion", body)
