"""Concurrent agent conversations against one endpoint: does every request get its answer?

The load that found the slot livelock (issue: the child never freezes under agent load): ``clients``
clients, each its own conversation, send ``requests`` chat requests in all. The conversations share
a long system prompt (``SYSTEM_WORDS`` words, ~600 tokens on the Qwen vocabulary) and each grows its
history turn by turn; every second request is streamed; each has ``max_tokens`` and a client timeout.
A request that gets no whole answer within the timeout is a failure: the figure that matters is
``failed`` (it must be 0), then the slowest answer.

Used by ``scripts/stress_conversations.py`` (against a running ``orchestrator up`` or a bare
llama-server) and by the stress test in ``tests/serve/test_stress_conversations.py``.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

SYSTEM_WORDS = 560  # words of the shared system prompt: ~600 tokens


@dataclass(frozen=True)
class Load:
    """What to send: ``requests`` requests in all over ``clients`` concurrent conversations."""

    model: str
    clients: int = 4
    requests: int = 120
    max_tokens: int = 24
    timeout: float = 20.0  # s per request, as an agent client's own timeout
    extra: dict[str, Any] = field(default_factory=dict)  # more body fields (``id_slot`` is per conversation)
    pin_slots: int = 0  # > 0: each conversation names slot ``conversation % pin_slots`` (straight to llama-server)
    session_keys: bool = False  # each conversation sends its own ``prompt_cache_key`` (a client session)


@dataclass
class Outcome:
    """One request: which conversation and turn, streamed or not, seconds taken, error (None: answered)."""

    conversation: int
    turn: int
    stream: bool
    seconds: float
    error: str | None = None


@dataclass
class Report:
    outcomes: list[Outcome]
    seconds: float

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.error is not None]

    def summary(self) -> str:
        ok = [o.seconds for o in self.outcomes if o.error is None]
        slowest = max(ok, default=0.0)
        lines = [
            f"{len(self.outcomes) - len(self.failed)} of {len(self.outcomes)} answered in {self.seconds:.1f} s "
            f"(slowest answer {slowest:.2f} s)"
        ]
        lines += [f"  conversation {o.conversation} turn {o.turn} stream={o.stream}: {o.error}" for o in self.failed]
        return "\n".join(lines)


def system_prompt() -> str:
    words = "You are a coding agent in a large repository; read files, run tests, and keep changes small"
    return " ".join(words.split()[i % 17] for i in range(SYSTEM_WORDS))


async def _one(client: httpx.AsyncClient, url: str, body: dict[str, Any], timeout: float) -> str:
    """Send one chat request; the answer's text. Raises on any failure, ``TimeoutError`` past ``timeout``."""
    async with asyncio.timeout(timeout):
        if not body.get("stream"):
            r = await client.post(url, json=body)
            if r.status_code != 200:
                raise RuntimeError(f"HTTP {r.status_code}: {r.text[:200]}")
            return str(r.json()["choices"][0]["message"].get("content") or "")
        text: list[str] = []
        done = False
        async with client.stream("POST", url, json=body) as r:
            if r.status_code != 200:
                raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:200]!r}")
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    break
                event = json.loads(line[6:])
                if "error" in event:
                    raise RuntimeError(f"error event: {event['error']}")
                for choice in event.get("choices", []):
                    text.append(choice.get("delta", {}).get("content") or "")
        if not done:
            raise RuntimeError("stream ended without [DONE]")
        return "".join(text)


async def _conversation(
    client: httpx.AsyncClient, base_url: str, load: Load, n: int, turns: list[int], out: list[Outcome]
) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt()},
        {"role": "user", "content": f"Task {n}: fix the failing test in module {n}."},
    ]
    for turn in turns:
        stream = turn % 2 == 1
        body: dict[str, Any] = {
            "model": load.model,
            "messages": messages,
            "max_tokens": load.max_tokens,
            "temperature": 0,
            "stream": stream,
            **load.extra,
        }
        if load.pin_slots:
            body["id_slot"] = n % load.pin_slots
        if load.session_keys:
            body["prompt_cache_key"] = f"stress-session-{n}"
        t0 = time.monotonic()
        try:
            answer = await _one(client, base_url + "/v1/chat/completions", body, load.timeout)
            out.append(Outcome(n, turn, stream, time.monotonic() - t0))
        except Exception as err:  # a failure is the measurement, never the end of the run
            out.append(Outcome(n, turn, stream, time.monotonic() - t0, f"{type(err).__name__}: {err}"))
            answer = ""
        reply = [{"role": "assistant", "content": answer}, {"role": "user", "content": f"{n}: next {turn}"}]
        messages = [*messages, *reply]


async def run(base_url: str, load: Load, headers: dict[str, str] | None = None) -> Report:
    """Send ``load`` to ``base_url`` (no ``/v1``); every request's outcome."""
    per = [list(range(c, load.requests, load.clients)) for c in range(load.clients)]
    out: list[Outcome] = []
    t0 = time.monotonic()
    limits = httpx.Limits(max_connections=load.clients * 2)
    async with httpx.AsyncClient(timeout=None, limits=limits, headers=headers) as client:
        await asyncio.gather(*(_conversation(client, base_url, load, n, turns, out) for n, turns in enumerate(per)))
    return Report(sorted(out, key=lambda o: o.turn), time.monotonic() - t0)
