"""One bench request: the ``/completion`` body at draft length K, the streamed call that
measures it, and reading back the draft length the server reports applying.

K travels as the request fields ``speculative.n_max`` / ``speculative.n_min`` only on a
binary with the per-request draft-length patch; see :mod:`orchestrator.bench.sweep`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from orchestrator.errors import UserError

N_MAX_FIELD = "speculative.n_max"  # request / generation-settings key added by that patch
N_MIN_FIELD = "speculative.n_min"


def reported_n_max(settings: Any) -> int | None:
    """The draft length a response's ``generation_settings`` reports (flat or nested key), or None."""
    if not isinstance(settings, dict):
        return None
    value = settings.get(N_MAX_FIELD)
    if value is None and isinstance(settings.get("speculative"), dict):
        value = settings["speculative"].get("n_max")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass
class Completion:
    """One streamed /completion: seconds to the first content, final event fields, output text."""

    ttft_s: float
    timings: dict[str, Any]
    settings: dict[str, Any]
    text: str
    tokens_predicted: int


async def complete(
    client: httpx.AsyncClient,
    base_url: str,
    body: dict[str, Any],
    auth: httpx.Auth | None = None,
) -> Completion:
    """POST a streamed ``/completion`` and collect it.

    Args:
        client: an httpx client (the bench's opens a new connection for every request).
        base_url: ``http://127.0.0.1:PORT``.
        body: the request (``stream`` is forced on).
        auth: the child's key (its instance's ``ChildLock.auth``), when the child is locked.

    Returns:
        :class:`Completion`; ``ttft_s`` is from sending to the first event with non-empty
        ``content`` (the final event's ``timings.prompt_ms`` when no content was streamed).

    Raises:
        UserError: on an HTTP error status (with the server's message) or a stream that ends
            without its final event.
        httpx.TransportError: when the connection fails.
    """
    t0 = time.perf_counter()
    key = auth if auth is not None else httpx.USE_CLIENT_DEFAULT
    async with client.stream("POST", f"{base_url}/completion", json=dict(body, stream=True), auth=key) as resp:
        if resp.status_code != 200:
            raise await _http_error(resp, base_url)
        ttft, parts, final = await _read_events(resp, t0)
    if final is None:
        raise UserError(f"{base_url}/completion: the stream ended without its final event")
    timings = final.get("timings") or {}
    if ttft is None:
        ttft = float(timings.get("prompt_ms") or 0.0) / 1000.0
    return Completion(
        ttft_s=ttft,
        timings=timings,
        settings=final.get("generation_settings") or {},
        text="".join(parts),
        tokens_predicted=int(final.get("tokens_predicted") or timings.get("predicted_n") or 0),
    )


async def _http_error(resp: httpx.Response, base_url: str) -> UserError:
    """The error for a non-200 answer, with the server's own message when it sent the OpenAI shape."""
    raw = (await resp.aread()).decode("utf-8", errors="replace")
    try:
        message = json.loads(raw)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = raw[:300]
    return UserError(f"{base_url}/completion answered {resp.status_code}: {message}")


async def _read_events(resp: httpx.Response, t0: float) -> tuple[float | None, list[str], dict[str, Any] | None]:
    """Read the server-sent events: (seconds from ``t0`` to the first content or None, the content
    pieces, the final event (the one with ``stop``) or None)."""
    ttft: float | None = None
    parts: list[str] = []
    final: dict[str, Any] | None = None
    async for line in resp.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if not data or data == "[DONE]":
            continue
        event = json.loads(data)
        content = event.get("content") or ""
        if content:
            if ttft is None:
                ttft = time.perf_counter() - t0
            parts.append(content)
        if event.get("stop"):
            final = event
    return ttft, parts, final


def request_body(
    prompt: str, *, k: int, per_request: bool, n_min: int | None, n_predict: int, temperature: float, seed: int
) -> dict[str, Any]:
    """The /completion body for one bench request at draft length ``k`` (tokens)."""
    body: dict[str, Any] = {
        "prompt": prompt,
        "n_predict": n_predict,
        "temperature": temperature,
        "seed": seed,
        "cache_prompt": False,
    }
    if per_request and k > 0:
        body[N_MAX_FIELD] = k
        body[N_MIN_FIELD] = min(n_min if n_min is not None else 0, k)
    return body
