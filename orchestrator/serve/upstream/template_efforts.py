"""Which ``reasoning_effort`` levels a replica's chat template accepts, learned once per replica.

A template may check the effort against its own vocabulary and raise for anything else
(``orchestrator.serve.repair.efforts``). What it accepts is read back from the server itself, not
guessed from the template's text: each level of ``efforts.LEVELS`` is rendered through the
replica's ``POST /apply-template`` (llama-server renders it on its HTTP thread, no slot is used),
with the same parsing of ``reasoning_effort`` as a chat request (``oaicompat_chat_params_parse``).
A 200 is a level the template takes. The answer is kept per replica address (a restart gets a new
port, and is asked again); a replica that cannot be asked is asked again on the next request.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING

from orchestrator.serve.repair.efforts import LEVELS

if TYPE_CHECKING:
    from orchestrator.serve.upstream.client import Upstream

log = logging.getLogger(__name__)
_HEADERS = {"content-type": "application/json"}
_MESSAGES = [{"role": "user", "content": "effort?"}]


class TemplateEfforts:
    """The accepted levels per replica (``base_url``): a tuple, or None when every level renders."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[str, ...] | None] = {}
        self._asking: dict[str, asyncio.Future[tuple[str, ...] | None]] = {}

    async def accepted(self, upstream: Upstream) -> tuple[str, ...] | None:
        """The levels ``upstream``'s template accepts (None: any, or it could not be asked)."""
        url = upstream.base_url
        if url in self._known:
            return self._known[url]
        pending = self._asking.get(url)
        if pending is None:  # one probe per replica, however many requests wait for it
            pending = self._asking[url] = asyncio.ensure_future(_probe(upstream))
            pending.add_done_callback(lambda done: self._learned(url, done))
        return await asyncio.shield(pending)

    def _learned(self, url: str, done: asyncio.Future[tuple[str, ...] | None]) -> None:
        self._asking.pop(url, None)
        if not done.cancelled() and done.exception() is None:
            self._known[url] = done.result()


async def _probe(upstream: Upstream) -> tuple[str, ...] | None:
    """Render each level; raises on a transport failure (asked again next time)."""
    ok: list[str] = []
    for level in LEVELS:
        content = json.dumps({"messages": _MESSAGES, "reasoning_effort": level}).encode()
        response = await upstream.open("POST", "/apply-template", content, _HEADERS)
        try:
            await response.read()
        finally:
            response.release()
        if response.status == 200:
            ok.append(level)
    if not ok or len(ok) == len(LEVELS):
        return None  # every level renders (or none: the probe itself is refused): nothing to map
    log.info("%s: the chat template accepts reasoning_effort %s; other levels go to the nearest", upstream.base_url,
             ", ".join(ok))  # fmt: skip
    return tuple(ok)
