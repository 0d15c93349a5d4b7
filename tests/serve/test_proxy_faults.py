"""Proxy behaviour under injected upstream faults (a scripted fake upstream; everything else real).

The fake upstream is only used where the fault must be injected: a kept-alive connection that
dies unanswered, a slow first byte, a stalled stream, an upstream error, canned reasoning output
(R01). The app is served by a real uvicorn; the instance table is a real ``Supervisor`` whose
(never started) instance is pointed at the fake.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from proxy_harness import FakeUpstream, Stack, chat_completion, delta_chunk, sse_event
from supervision_helpers import fake_spec

from orchestrator.config.schema import Config, ModelConfig, ServerConfig, Timeouts

CHAT = {"model": "demo", "messages": [{"role": "user", "content": "Hi"}]}


def make_stack(tmp_path: Path, *, model: dict[str, Any] | None = None, **server: Any) -> Stack:
    config = Config(
        server=ServerConfig(**server), models=[ModelConfig(name="demo", path="/unused.gguf", **(model or {}))]
    )
    return Stack(config, [fake_spec()], tmp_path / "logs")


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = make_stack(tmp_path)
    yield s
    s.close()


def metric(stack: Stack, name: str, **labels: str) -> float | None:
    """The value of one sample in the proxy's /metrics, or None when absent."""
    text = httpx.get(stack.url + "/metrics").text
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(name + "{" + want + "}") or (not labels and line.startswith(name + " ")):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_retry_once_when_a_kept_alive_connection_dies_unanswered(stack: Stack) -> None:
    """A pooled upstream connection dies unanswered (an unpatched llama-server closes the connection
    it advertised as keep-alive after a stream; a restarted one drops its sockets): the next request
    on it gets no response byte. The proxy resends once, on a new connection, and the client never
    sees 'Server disconnected without sending a response'."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await fake.read_request(reader)
        await fake.write_json(writer, chat_completion(f"answer {n}"))
        if n == 0:
            await fake.read_request(reader)  # the pooled second request ...
            return  # ... is dropped: connection closed, not one response byte

    fake = FakeUpstream(stack, handler)
    stack.point_at(fake.url)
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="x", max_retries=0)
    first = client.chat.completions.create(model="demo", messages=CHAT["messages"])
    second = client.chat.completions.create(model="demo", messages=CHAT["messages"])
    assert first.choices[0].message.content == "answer 0"
    assert second.choices[0].message.content == "answer 1"
    assert fake.connections == 2
    assert len(fake.requests) == 3  # the dropped one was never answered, so resending it is safe
    assert metric(stack, "orchestrator_upstream_retries_total", model="demo") == 1.0


def test_a_fresh_connection_closed_unanswered_is_retried_once_then_502(stack: Stack) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await fake.read_request(reader)  # and close

    fake = FakeUpstream(stack, handler)
    stack.point_at(fake.url)
    r = httpx.post(stack.url + "/v1/chat/completions", json=CHAT)
    assert r.status_code == 502
    assert r.json()["error"]["code"] == "upstream_disconnected"
    assert r.json()["error"]["type"] == "upstream_error"
    assert r.headers["retry-after"] == "5"  # upstream trouble: the replica is being restarted
    assert fake.connections == 2  # one try and exactly one retry


def test_first_byte_timeout_gives_504(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, timeouts=Timeouts(first_byte=0.5))
    try:

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
            await fake.read_request(reader)
            await asyncio.sleep(30)  # a prefill that never ends

        fake = FakeUpstream(stack, handler)
        stack.point_at(fake.url)
        started = time.monotonic()
        r = httpx.post(stack.url + "/v1/chat/completions", json=CHAT, timeout=20)
        assert r.status_code == 504
        assert r.json()["error"]["code"] == "upstream_timeout"
        assert time.monotonic() - started < 10
        assert stack.supervisor.instances[0].in_flight == 0
    finally:
        stack.close()


def test_idle_timeout_mid_stream_ends_with_an_error_event_and_done(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, timeouts=Timeouts(idle=0.5))
    try:

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
            await fake.read_request(reader)
            await fake.write_sse_head(writer)
            await fake.write_chunk(writer, sse_event(delta_chunk("Hel")))
            await asyncio.sleep(30)  # the upstream hangs mid-stream

        fake = FakeUpstream(stack, handler)
        stack.point_at(fake.url)
        with httpx.stream("POST", stack.url + "/v1/chat/completions", json={**CHAT, "stream": True}, timeout=20) as r:
            assert r.status_code == 200
            body = r.read()
        events = [e for e in body.split(b"\n\n") if e]
        assert json.loads(events[0][6:])["choices"][0]["delta"]["content"] == "Hel"
        error = json.loads(events[1][6:])["error"]
        assert error["code"] == "upstream_timeout" and error["type"] == "timeout_error"
        assert events[-1] == b"data: [DONE]"

        # The official client raises the error event as an APIError after the first chunk.
        client = openai.OpenAI(base_url=stack.url + "/v1", api_key="x", max_retries=0)
        got = []
        with pytest.raises(openai.APIError, match="no data from llama-server"):
            for chunk in client.chat.completions.create(model="demo", messages=CHAT["messages"], stream=True):
                got.append(chunk.choices[0].delta.content)
        assert got == ["Hel"]
    finally:
        stack.close()


def test_upstream_5xx_becomes_502_with_its_message_and_4xx_passes(stack: Stack) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while (body := await fake.read_request(reader)) is not None:
            if b"boom" in body:
                await fake.write_json(
                    writer, {"error": {"code": 500, "message": "template exploded", "type": "server_error"}}, status=500
                )
            else:
                await fake.write_json(
                    writer,
                    {"error": {"code": 400, "message": "unknown sampler 'q'", "type": "invalid_request_error"}},
                    status=400,
                )

    fake = FakeUpstream(stack, handler)
    stack.point_at(fake.url)
    r = httpx.post(
        stack.url + "/v1/chat/completions", json={"model": "demo", "messages": [{"role": "user", "content": "boom"}]}
    )
    assert r.status_code == 502
    assert r.json()["error"]["type"] == "upstream_error"
    assert "template exploded" in r.json()["error"]["message"]
    r = httpx.post(stack.url + "/v1/chat/completions", json=CHAT)
    assert r.status_code == 400
    # a 4xx that is not a context overflow passes through as it is (overflows get the code agents
    # act on: tests/serve/test_agent_errors.py)
    assert r.json() == {
        "error": {"message": "unknown sampler 'q'", "type": "invalid_request_error", "param": None, "code": None}
    }
    # a stream request that fails upstream before streaming gets a plain JSON error too
    r = httpx.post(stack.url + "/v1/chat/completions", json={**CHAT, "stream": True})
    assert r.status_code == 400 and r.headers["content-type"] == "application/json"


def test_r01_reasoning_in_content_is_split(stack: Stack) -> None:
    """R01: the prompt opened <think>, so the model printed only the closing tag."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await fake.read_request(reader)
        await fake.write_json(writer, chat_completion("The user greets me.\n</think>\n\nHello there!"))

    fake = FakeUpstream(stack, handler)
    stack.point_at(fake.url)
    r = httpx.post(stack.url + "/v1/chat/completions", json=CHAT)
    message = r.json()["choices"][0]["message"]
    assert message["content"] == "Hello there!"
    assert message["reasoning_content"] == "The user greets me."
    assert metric(stack, "orchestrator_repairs_total", kind="think_split", model="demo") == 1.0


def test_r01_stream_with_the_tag_split_across_chunks(stack: Stack) -> None:
    """R01 streamed, '</th' + 'ink>' in two chunks, upstream not splitting reasoning itself."""
    pieces = ["The user", " greets me.\n</th", "ink>\n\nHello", " there!"]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await fake.read_request(reader)
        await fake.write_sse_head(writer)
        for piece in pieces:
            await fake.write_chunk(writer, sse_event(delta_chunk(piece)))
        await fake.write_chunk(writer, sse_event(delta_chunk(finish="stop", timings={"predicted_n": 4})))
        await fake.write_chunk(writer, b"data: [DONE]\n\n")
        await fake.end_chunks(writer)

    fake = FakeUpstream(stack, handler)
    stack.point_at(fake.url)
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="x", max_retries=0)
    reasoning, content = "", ""
    for chunk in client.chat.completions.create(
        model="demo", messages=CHAT["messages"], stream=True, extra_body={"reasoning_format": "none"}
    ):
        delta = chunk.choices[0].delta
        content += delta.content or ""
        reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
    assert reasoning == "The user greets me."
    assert content == "Hello there!"
    assert metric(stack, "orchestrator_repairs_total", kind="think_split", model="demo") == 1.0


def test_stream_without_repair_passes_upstream_bytes_untouched(stack: Stack) -> None:
    events = [
        sse_event(delta_chunk("a <b> c")),
        sse_event(delta_chunk(" d")),
        b": ping\n\n",
        sse_event(delta_chunk(finish="stop", timings={"predicted_n": 2})),
        b"data: [DONE]\n\n",
    ]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await fake.read_request(reader)
        await fake.write_sse_head(writer)
        for event in events:
            await fake.write_chunk(writer, event)
        await fake.end_chunks(writer)

    fake = FakeUpstream(stack, handler)
    stack.point_at(fake.url)
    # thinking on (template default) and llama-server splitting reasoning: no repair applies
    with httpx.stream("POST", stack.url + "/v1/chat/completions", json={**CHAT, "stream": True}) as r:
        assert r.headers["content-type"] == "text/event-stream"
        body = r.read()
    assert body == b"".join(events)


def test_thinking_off_stream_moves_reasoning_to_content(stack: Stack) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await fake.read_request(reader)
        await fake.write_sse_head(writer)
        chunk = delta_chunk()
        chunk["choices"][0]["delta"]["reasoning_content"] = "Four."
        await fake.write_chunk(writer, sse_event(chunk))
        await fake.write_chunk(writer, sse_event(delta_chunk(finish="stop")) + b"data: [DONE]\n\n")
        await fake.end_chunks(writer)

    fake = FakeUpstream(stack, handler)
    stack.point_at(fake.url)
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="x", max_retries=0)
    chunks = list(
        client.chat.completions.create(
            model="demo", messages=CHAT["messages"], stream=True, extra_body={"enable_thinking": False}
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Four."
    assert metric(stack, "orchestrator_repairs_total", kind="reasoning_moved_to_content", model="demo") == 1.0


def test_reasoning_only_answer_is_retried_without_thinking(tmp_path: Path) -> None:
    stack = make_stack(tmp_path, model={"on_reasoning_only": "retry_without_thinking"})
    try:

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
            while (body := await fake.read_request(reader)) is not None:
                kwargs = json.loads(body).get("chat_template_kwargs") or {}
                if kwargs.get("enable_thinking") is False:
                    await fake.write_json(writer, chat_completion("Hello!"))
                else:
                    await fake.write_json(writer, chat_completion("", reasoning="I should greet."))

        fake = FakeUpstream(stack, handler)
        stack.point_at(fake.url)
        r = httpx.post(stack.url + "/v1/chat/completions", json=CHAT)
        assert r.json()["choices"][0]["message"]["content"] == "Hello!"
        assert [json.loads(b).get("chat_template_kwargs") for b in fake.requests] == [None, {"enable_thinking": False}]
        assert metric(stack, "orchestrator_repairs_total", kind="reasoning_only_retried", model="demo") == 1.0
    finally:
        stack.close()


def test_reasoning_only_answer_is_continued_then_marked_cut_by_default(stack: Stack) -> None:
    """An answer that only thought is continued once with its reasoning as the prefill and the
    thinking closed (``repair.thinking_only``); still empty, it ends ``length``, never ``stop``."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while (body := await fake.read_request(reader)) is not None:
            continued = "continue_final_message" in json.loads(body)  # llama-server leaves the prefill out
            await fake.write_json(writer, chat_completion("", reasoning=None if continued else "I should greet."))

    fake = FakeUpstream(stack, handler)
    stack.point_at(fake.url)
    r = httpx.post(stack.url + "/v1/chat/completions", json=CHAT)
    choice = r.json()["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "", "reasoning_content": "I should greet."}
    assert choice["finish_reason"] == "length"
    again = json.loads(fake.requests[1])
    assert again["messages"][-1] == {"role": "assistant", "content": "", "reasoning_content": "I should greet."}
    assert (again["continue_final_message"], again["add_generation_prompt"]) == ("content", False)
    assert metric(stack, "orchestrator_repairs_total", kind="thinking_continued", model="demo") == 1.0
    assert metric(stack, "orchestrator_repairs_total", kind="thinking_only_incomplete", model="demo") == 1.0


def test_a_kept_alive_connection_the_server_closed_is_not_reused(stack: Stack) -> None:
    """When the close has arrived before the next request, the pool sees it and opens a new
    connection at once: no failed send, no resend."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await fake.read_request(reader)
        await fake.write_json(writer, chat_completion(f"answer {n}"))  # then close, despite keep-alive

    fake = FakeUpstream(stack, handler)
    stack.point_at(fake.url)
    for n in range(3):
        r = httpx.post(stack.url + "/v1/chat/completions", json=CHAT)
        assert r.json()["choices"][0]["message"]["content"] == f"answer {n}"
        time.sleep(0.1)  # let the close arrive
    assert fake.connections == 3 and len(fake.requests) == 3
    assert metric(stack, "orchestrator_upstream_retries_total", model="demo") == 0.0
