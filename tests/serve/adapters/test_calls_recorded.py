"""Each API's call driven on llama-server's recorded answers, with no llama-server and no proxy.

``tests/data/upstream_recorded.json`` holds what the pinned llama-server answered on each API's
route for the demo model, whole and streamed, chunk by chunk as the bytes came
(``scripts/record_upstream.py`` records it again). Here each API's adapter opens the call for the
same client body, the call prepares it (the request side must still send what was recorded), and
the recorded bytes go through the call's whole-answer path and its stream codec
(``serve.streaming.relay``): the client gets its API's shape, the same text whole and streamed,
and its API's last event. The live round trip of each API and stream flavour stays in
``tests/serve/test_api_anthropic_responses.py``, ``test_api_cases.py`` and ``ollama/``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.schema import ModelConfig
from orchestrator.serve.adapters.base import Call
from orchestrator.serve.adapters.plan import BodyPlan
from orchestrator.serve.cache.prefix import policy_for
from orchestrator.serve.registry import adapter_for
from orchestrator.serve.streaming import RelayOutcome, relay

DATA = Path(__file__).resolve().parents[2] / "data" / "upstream_recorded.json"
CASES: dict[tuple[str, bool], dict[str, Any]] = {
    (c["name"], c["stream"]): c for c in json.loads(DATA.read_text())["cases"]
}
NAMES = sorted({name for name, _ in CASES})
MODEL = ModelConfig(name="demo", path="/unused.gguf", thinking=False)  # as recorded


class Answering:
    """What an adapter reads of the request in flight (``adapters.route.Request``), with no proxy."""

    def __init__(self, call: Call, plan: BodyPlan) -> None:
        self.model, self.call, self.started = MODEL, call, time.monotonic()
        self.thinking, self.trim_top, self.attempt = plan.thinking, plan.trim_top, 1
        self.continued: dict[str, Any] | None = None
        self.sent = plan.current(call.body)
        self.repairs: list[str] = []
        self.warnings: list[str] = []
        self.accounted: list[dict[str, Any]] = []

    @property
    def body(self) -> dict[str, Any]:
        return self.sent

    @property
    def responses_store(self) -> Any:
        return None  # nothing stored: a Responses answer says store false

    @property
    def client_body(self) -> dict[str, Any]:
        return self.call.body

    def count_repair(self, kind: str) -> None:
        self.repairs.append(kind)

    def warn(self, header: str) -> None:
        self.warnings.append(header)

    def keep_alive(self, seconds: float) -> None:
        raise AssertionError("no case sends keep_alive")

    async def load(self) -> None:
        raise AssertionError("no case asks to load")

    def account(self, answer: dict[str, Any]) -> None:
        self.accounted.append(answer)


def _open(case: dict[str, Any]) -> tuple[Call, Answering]:
    adapter = adapter_for(case["path"])
    assert adapter is not None
    call = adapter.open(case["body"], json.dumps(case["body"]).encode())
    return call, Answering(call, call.prepare(MODEL, policy_for(MODEL)))


def _sse(data: bytes) -> list[Any]:
    """The ``data:`` payloads of an SSE body, JSON-decoded (``[DONE]`` as the string)."""
    out: list[Any] = []
    for block in data.decode().split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: "):
                payload = line[len("data: ") :]
                out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def _ndjson(data: bytes) -> list[Any]:
    return [json.loads(line) for line in data.decode().splitlines() if line.strip()]


def _responses_text(response: dict[str, Any]) -> str:
    return "".join(
        part.get("text", "") for item in response["output"] if item.get("type") == "message" for part in item["content"]
    )


# per API: the text of a whole answer; the events of a stream, its text, and whether it ended as the API ends
WHOLE: dict[str, Callable[[dict[str, Any]], str]] = {
    "chat": lambda a: a["choices"][0]["message"]["content"],
    "completions": lambda a: a["choices"][0]["text"],
    "messages": lambda a: "".join(b["text"] for b in a["content"] if b["type"] == "text"),
    "responses": _responses_text,
    "ollama_chat": lambda a: a["message"]["content"] if a["done"] else "",
}
EVENTS: dict[str, Callable[[bytes], list[Any]]] = dict.fromkeys(NAMES, _sse) | {"ollama_chat": _ndjson}
STREAMED: dict[str, Callable[[list[Any]], str]] = {
    "chat": lambda es: "".join(e["choices"][0]["delta"].get("content") or "" for e in es[:-1] if e["choices"]),
    "completions": lambda es: "".join(e["choices"][0]["text"] for e in es[:-1] if e["choices"]),
    "messages": lambda es: "".join(
        e["delta"]["text"] for e in es if e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta"
    ),
    "responses": lambda es: "".join(e["delta"] for e in es if e["type"] == "response.output_text.delta"),
    "ollama_chat": lambda es: "".join(e["message"]["content"] for e in es if "message" in e),
}
ENDED: dict[str, Callable[[list[Any]], bool]] = {
    "chat": lambda es: es[-1] == "[DONE]",
    "completions": lambda es: es[-1] == "[DONE]",
    "messages": lambda es: es[-1]["type"] == "message_stop",
    "responses": lambda es: es[-1]["type"] == "response.completed",
    "ollama_chat": lambda es: es[-1]["done"] is True and es[-1]["model"] == "demo",
}


# per API: why the answer ended, whole and as the stream says it: every case is cut by its token limit
CUT: dict[str, tuple[str, Callable[[dict[str, Any]], Any], Callable[[list[Any]], Any]]] = {
    "chat": ("length", lambda a: a["choices"][0]["finish_reason"], lambda es: es[-2]["choices"][0]["finish_reason"]),
    "completions": (
        "length",
        lambda a: a["choices"][0]["finish_reason"],
        lambda es: es[-2]["choices"][0]["finish_reason"],
    ),
    "messages": (
        "max_tokens",
        lambda a: a["stop_reason"],
        lambda es: next(e["delta"]["stop_reason"] for e in es if e["type"] == "message_delta"),
    ),
    "responses": (
        "max_output_tokens",
        lambda a: a["status"] == "incomplete" and a["incomplete_details"]["reason"],
        lambda es: es[-1]["response"]["status"] == "incomplete" and es[-1]["response"]["incomplete_details"]["reason"],
    ),
    "ollama_chat": ("length", lambda a: a["done_reason"], lambda es: es[-1]["done_reason"]),
}


async def _relay(call: Call, req: Answering, chunks: list[str]) -> tuple[bytes, RelayOutcome]:
    sent: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["body"])

    async def upstream() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk.encode()

    outcome = await relay(upstream(), send, call.codec(req))
    return b"".join(sent), outcome


def test_every_api_has_a_recorded_whole_and_streamed_answer() -> None:
    assert set(CASES) == {(n, s) for n in NAMES for s in (False, True)}
    assert set(NAMES) == set(WHOLE) == set(STREAMED) == set(ENDED) == set(CUT)


@pytest.mark.parametrize("key", sorted(CASES), ids=lambda k: f"{k[0]}-{'stream' if k[1] else 'whole'}")
def test_the_call_still_sends_what_was_recorded(key: tuple[str, bool]) -> None:
    case = CASES[key]
    call, req = _open(case)
    assert call.internal.path == case["upstream_path"]
    assert req.sent == case["sent"], "the route sends another body now: run scripts/record_upstream.py"


@pytest.mark.parametrize("name", NAMES)
def test_the_call_answers_whole_and_streamed_alike_in_its_apis_shape(name: str) -> None:
    whole_case, stream_case = CASES[(name, False)], CASES[(name, True)]
    call, req = _open(whole_case)
    answer = call.whole(req, "".join(whole_case["chunks"]).encode())
    assert isinstance(answer, bytes), answer
    whole = json.loads(answer)
    text, (reason, whole_reason, streamed_reason) = WHOLE[name](whole), CUT[name]
    assert text and req.accounted, answer[:300]  # the answer's timings or usage reached the request
    assert whole_reason(whole) == reason, whole

    call, req = _open(stream_case)
    data, outcome = asyncio.run(_relay(call, req, stream_case["chunks"]))
    events = EVENTS[name](data)
    assert outcome.error is None and (outcome.timings or outcome.usage), data[-300:]
    assert STREAMED[name](events) == text  # greedy on the same prompt: the same answer both ways
    assert ENDED[name](events), events[-1]
    assert streamed_reason(events) == reason, events[-2:]
