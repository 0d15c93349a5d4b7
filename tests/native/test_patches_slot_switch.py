"""Patch 0008 (native/patches/0008-slot-switch-saves-to-prompt-cache.patch): on one slot, a request
that would cut off 32 or more tokens of the slot's prompt saves the slot in the host-memory prompt
cache (``--cache-ram``, on by default) first, and a request for which that cache holds a better
start than the slot loads it.

Upstream did both only when over half of the slot would go (``f_keep < 0.5``): two conversations
sharing a long system prompt cut off each other's history at every switch, and a short side
request sharing the system prompt hid the longer conversation the cache held. Each prompt here is
a token list (the pieces tokenized once), so a later turn extends the earlier one exactly.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from native_server import running_server

from orchestrator.models.tiny import write_tiny_model

pytestmark = [pytest.mark.native, pytest.mark.slow]

NEW = 20  # tokens each later turn adds
SLACK = 32  # the hybrid model rolls back to a checkpoint a few tokens before the shared prefix's end


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    model = write_tiny_model(tmp_path_factory.mktemp("switch") / "tiny.gguf", mode="echo", q=0.0, seed=0)
    with running_server(model, "-np", "1", "-c", "8192") as url, httpx.Client(base_url=url, timeout=120.0) as client:
        yield client


def _tokens(client: httpx.Client, text: str) -> list[int]:
    resp = client.post("/tokenize", json={"content": text})
    assert resp.status_code == 200, resp.text
    tokens: list[int] = resp.json()["tokens"]
    return tokens


def _run(client: httpx.Client, prompt: list[int]) -> int:
    """Complete ``prompt`` (8 tokens); the prompt tokens processed (``timings.prompt_n``)."""
    body = {"prompt": prompt, "n_predict": 8, "temperature": 0, "cache_prompt": True}
    resp = client.post("/completion", json=body)
    assert resp.status_code == 200, resp.text
    return int(resp.json()["timings"]["prompt_n"])


def _piece(client: httpx.Client, tag: str, words: int) -> list[int]:
    return _tokens(client, " " + " ".join(f"{tag}{i} alpha" for i in range(words)))


def test_two_conversations_sharing_a_system_prompt_keep_their_history(server: httpx.Client) -> None:
    system = _tokens(server, "You are a careful coding agent in a large repository. " * 40)
    convs = {c: system + _piece(server, c, 30) for c in ("a", "b")}
    for c in convs:
        _run(server, convs[c])
    processed = []
    for turn in range(3):
        for c in convs:
            convs[c] = convs[c] + _piece(server, f"{c}t{turn}x", NEW // 4)[:NEW]
            processed.append((c, turn, _run(server, convs[c])))
    assert all(n <= NEW + SLACK for _, _, n in processed), processed


def test_a_short_side_request_does_not_hide_the_conversation(server: httpx.Client) -> None:
    """The side request's own tail is short (no save when the conversation comes back): the
    cache's longer state of the conversation is found anyway."""
    system = _tokens(server, "You are a patient reviewer of pull requests. " * 40)
    main = system + _piece(server, "main", 30)
    _run(server, main)
    main = main + _piece(server, "more", NEW // 4)[:NEW]
    _run(server, main)
    _run(server, system + _piece(server, "title", 2))  # a title request: its tail is a few tokens
    main = main + _piece(server, "last", NEW // 4)[:NEW]
    processed = _run(server, main)
    assert processed <= NEW + SLACK, processed
