"""One streamed request of an agent session, timed as the client lives it (``orchestrator bench agent``).

Every arrival of bytes is timed: the response head, then each read of the body, SSE comments and
pings included. The longest silence is the largest gap between two arrivals, the first measured
from sending the request, so a request that waits before its head (a prefill, a queue, a model
loading) shows its wait. TTFT is the time to the first event carrying output (text, reasoning or a
tool call). The prompt tokens and the cached ones come from the API's own usage (Anthropic
``input_tokens`` + ``cache_read_input_tokens``, Responses ``input_tokens_details.cached_tokens``,
chat ``prompt_tokens_details.cached_tokens``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from orchestrator.bench.agent_shapes import CHAT, MESSAGES, RESPONSES


@dataclass
class Answer:
    """What one request got: HTTP status, prompt tokens (all, cached), TTFT, longest silence, error."""

    status: int
    total: int | None = None
    cached: int | None = None
    ttft: float | None = None
    silence: float | None = None
    wall: float | None = None
    error: str = ""


def longest_silence(start: float, arrivals: Sequence[float]) -> float | None:
    """The largest gap between consecutive arrivals, the first one measured from ``start``."""
    if not arrivals:
        return None
    return max(b - a for a, b in zip([start, *arrivals[:-1]], arrivals, strict=True))


def prompt_usage(route: str, event: dict[str, Any]) -> tuple[int, int] | None:
    """``(prompt tokens, cached prompt tokens)`` when this stream event reports them."""
    if route == MESSAGES:
        usage = (event.get("message") or {}).get("usage") if event.get("type") == "message_start" else None
        if usage and "input_tokens" in usage:
            cached = int(usage.get("cache_read_input_tokens") or 0)
            return int(usage["input_tokens"]) + cached, cached
    elif route == RESPONSES:
        usage = (event.get("response") or {}).get("usage") if event.get("type") == "response.completed" else None
        if usage:
            return int(usage["input_tokens"]), int((usage.get("input_tokens_details") or {}).get("cached_tokens") or 0)
    elif isinstance(event.get("usage"), dict) and "prompt_tokens" in event["usage"]:
        usage = event["usage"]
        return int(usage["prompt_tokens"]), int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return None


def is_output(route: str, event: dict[str, Any]) -> bool:
    """Whether the event carries generated output (text, reasoning, a tool call)."""
    etype = str(event.get("type", ""))
    if route == MESSAGES:
        return etype in ("content_block_start", "content_block_delta")
    if route == RESPONSES:
        return etype.endswith(".delta") or etype == "response.output_item.added"
    if route == CHAT:
        delta = ((event.get("choices") or [{}])[0] or {}).get("delta") or {}
        return any(delta.get(k) for k in ("content", "reasoning_content", "tool_calls"))
    return False


def is_error(event: dict[str, Any]) -> bool:
    etype = event.get("type")
    return etype in ("error", "response.failed") or ("error" in event and not etype)


class Lines:
    """Complete text lines out of a byte stream read in arbitrary pieces."""

    def __init__(self) -> None:
        self.rest = b""

    def feed(self, chunk: bytes) -> list[str]:
        *done, self.rest = (self.rest + chunk).split(b"\n")
        return [line.decode("utf-8", errors="replace").rstrip("\r") for line in done]


def _events(lines: list[str]) -> list[dict[str, Any]]:
    out = []
    for line in lines:
        if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
            try:
                event = json.loads(line[5:])
            except ValueError:
                continue
            if isinstance(event, dict):
                out.append(event)
    return out


def stream_call(client: httpx.Client, url: str, route: str, body: dict[str, Any]) -> Answer:
    """POST ``body`` (streamed) to ``url`` and time it; never raises for an HTTP or stream error."""
    start = time.perf_counter()
    arrivals: list[float] = []
    answer = Answer(status=0)
    try:
        with client.stream("POST", url, json=body, headers={"x-api-key": "none"}) as resp:
            arrivals.append(time.perf_counter())
            answer.status = resp.status_code
            lines = Lines()
            for chunk in resp.iter_raw():
                arrivals.append(time.perf_counter())
                if resp.status_code != 200:
                    answer.error += chunk.decode("utf-8", errors="replace")
                    continue
                _read(route, _events(lines.feed(chunk)), answer, arrivals[-1] - start)
    except httpx.HTTPError as err:
        answer.error = answer.error or f"{type(err).__name__}: {err}"
    answer.silence = longest_silence(start, arrivals)
    answer.wall = time.perf_counter() - start
    answer.error = " ".join(answer.error.split())[:300]
    return answer


def _read(route: str, events: list[dict[str, Any]], answer: Answer, elapsed: float) -> None:
    for event in events:
        if answer.ttft is None and is_output(route, event):
            answer.ttft = elapsed
        if is_error(event) and not answer.error:
            answer.error = json.dumps(event)
        usage = prompt_usage(route, event)
        if usage is not None:
            answer.total, answer.cached = usage
