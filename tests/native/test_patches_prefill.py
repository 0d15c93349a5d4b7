"""Patch 0007 (native/patches/0007-prefill-continued-not-repeated.patch): a request whose last
message is the assistant's (a prefill) is answered with the continuation only, whole and streamed,
on chat and Messages, with thinking on and off. llama-server used to parse the prefill as the start
of the answer: ``"A1 prefix..."`` for the prefill ``"A1 prefix"``, ``"{|}~"`` for ``"{"``.

The echo tiny model answers the same tokens for the same prompt, so the answer with
``echo: true`` (which keeps the prefill, as before) is the prefill followed by the continuation.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from native_server import running_server

from orchestrator.models.tiny import write_tiny_model

pytestmark = [pytest.mark.native, pytest.mark.slow]

PREFILL = "A1 prefix"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    model = write_tiny_model(tmp_path_factory.mktemp("prefill") / "tiny.gguf", mode="echo", q=0.0, seed=0)
    with running_server(model, "-np", "1") as url, httpx.Client(base_url=url, timeout=60.0) as client:
        yield client


def _body(thinking: bool, **extra: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": "U1"}, {"role": "assistant", "content": PREFILL}]
    body = {"model": "tiny", "max_tokens": 6, "temperature": 0.0, "messages": messages}
    return {**body, "chat_template_kwargs": {"enable_thinking": thinking}, **extra}


def _chat(client: httpx.Client, body: dict[str, Any]) -> str:
    if not body.get("stream"):
        resp = client.post("/v1/chat/completions", json=body)
        assert resp.status_code == 200, resp.text
        return str(resp.json()["choices"][0]["message"]["content"])
    text = ""
    with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    text += choice["delta"].get("content") or ""
    return text


def _message(client: httpx.Client, body: dict[str, Any]) -> str:
    if not body.get("stream"):
        resp = client.post("/v1/messages", json=body)
        assert resp.status_code == 200, resp.text
        return "".join(b.get("text", "") for b in resp.json()["content"])
    text = ""
    with client.stream("POST", "/v1/messages", json=body) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                if event["type"] == "content_block_delta":
                    text += event["delta"].get("text", "")
    return text


@pytest.mark.parametrize("thinking", [True, False])
@pytest.mark.parametrize("stream", [False, True])
def test_a_chat_prefill_is_continued_not_repeated(server: httpx.Client, thinking: bool, stream: bool) -> None:
    echoed = _chat(server, _body(thinking, echo=True))
    answer = _chat(server, _body(thinking, stream=stream))
    assert echoed.startswith(PREFILL), echoed  # echo keeps the old behaviour on request
    assert answer and not answer.startswith(PREFILL), answer
    assert PREFILL + answer == echoed


@pytest.mark.parametrize("stream", [False, True])
def test_a_messages_prefill_is_continued_not_repeated(server: httpx.Client, stream: bool) -> None:
    body = {"model": "tiny", "max_tokens": 4, "temperature": 0.0, "stream": stream}
    body["messages"] = [{"role": "user", "content": "U1"}, {"role": "assistant", "content": "{"}]
    answer = _message(server, body)
    assert answer.startswith("|}~"), answer  # the echo model's next tokens after "{", without it
