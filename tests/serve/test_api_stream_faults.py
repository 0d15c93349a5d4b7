"""Anthropic and Responses streams that break mid-way (a scripted fake upstream injects the fault).

llama-server ends these streams with their own last event and no ``data: [DONE]``; when the
connection dies after the first events the client must get one error event in its API's shape
(which its SDK raises) and no OpenAI terminator, never a hang or a silent cut.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from proxy_harness import FakeUpstream, Stack
from supervision_helpers import fake_spec

from orchestrator.config.schema import Config, ModelConfig, ServerConfig

MESSAGE_START = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","type":"message","role":"assistant",'
    b'"content":[],"model":"demo","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":0}}}'
    b"\n\n"
)
RESPONSE_CREATED = (
    b'event: response.created\ndata: {"type":"response.created","response":{"id":"resp_1","object":"response",'
    b'"status":"in_progress"}}\n\n'
)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    config = Config(server=ServerConfig(), models=[ModelConfig(name="demo", path="/unused.gguf")])
    s = Stack(config, [fake_spec()], tmp_path / "logs")
    yield s
    s.close()


def dying_after(stack: Stack, first: bytes) -> FakeUpstream:
    """A fake llama-server that sends ``first`` as a stream, then drops the connection."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await fake.read_request(reader)
        await fake.write_sse_head(writer)
        await fake.write_chunk(writer, first)
        await asyncio.sleep(0.05)

    fake = FakeUpstream(stack, handler)
    stack.point_at(fake.url)
    return fake


def test_anthropic_stream_cut_ends_with_an_anthropic_error_event(stack: Stack) -> None:
    dying_after(stack, MESSAGE_START)
    client = anthropic.Anthropic(base_url=stack.url, api_key="x", max_retries=0, timeout=30)
    with (
        pytest.raises(anthropic.APIStatusError) as err,
        client.messages.stream(model="demo", max_tokens=8, messages=[{"role": "user", "content": "Hi"}]) as s,
    ):
        list(s)
    assert err.value.body["error"]["type"] == "api_error"  # type: ignore[index]
    body = {"model": "demo", "max_tokens": 8, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
    text = httpx.post(stack.url + "/v1/messages", json=body, timeout=30).text
    assert text.startswith("event: message_start") and text.endswith("\n\n") and "[DONE]" not in text
    assert text.split("\n\n")[-2].startswith('event: error\ndata: {"type": "error"')


def test_responses_stream_cut_raises_in_the_openai_sdk(stack: Stack) -> None:
    dying_after(stack, RESPONSE_CREATED)
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="x", max_retries=0, timeout=30)
    seen: list[str] = []
    with pytest.raises(openai.APIError):
        for event in client.responses.create(model="demo", input="Hi", stream=True):
            seen.append(event.type)
    # Codex reads response.failed as a failed turn (it stops there); the SDK raises on the error event after it
    assert seen[-1] == "response.failed"
    assert "response.completed" not in seen
