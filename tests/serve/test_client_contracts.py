"""What the clients send this month (issue 36: B70, B72, B73, B74, B75), through the endpoint to
real llama-servers, with the clients' own bodies.

One stack: API key ``K1``; two copies of the echo model, ``demo`` and ``demo-b`` (thinking off, one
slot each), with ``server.default_model: demo-b``, so a request without ``model`` has somewhere to
go when its conversation is new, and a follow-up that went to ``demo`` shows that its conversation,
not the default, decided.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import Stack, real_stack

pytestmark = [pytest.mark.native, pytest.mark.slow]

KEY = "K1"
AUTH = {"Authorization": f"Bearer {KEY}"}
ANTHROPIC = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
# B70's S0: about 1,500 tokens of fixed text
S0 = " ".join(f"Rule {i}: keep every change small, tested and explained in its commit." for i in range(110))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    one = {"parallel": 1, "ctx_size": 4096, "thinking": False, "threads": 1}
    models = [{"name": "demo", **one}, {"name": "demo-b", **one}]
    server = {"api_keys": [KEY], "default_model": "demo-b"}
    s = real_stack(tmp_path_factory.mktemp("contracts"), echo_model, bin_info, server=server, models=models)
    yield s
    s.close()


def post(stack: Stack, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(stack.url + path, json=body, headers=headers or AUTH, timeout=120)


def processed(usage: dict[str, Any]) -> int:
    """Prompt tokens a Responses answer processed (its input less what came from the cache)."""
    return int(usage["input_tokens"]) - int(usage["input_tokens_details"]["cached_tokens"])


# ------------------------------------------------------------------------------------------ B73


UPGRADE = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}


def test_b73_a_websocket_upgrade_is_426_after_the_key_check(stack: Stack) -> None:
    """Codex's WebSocket transport: 426 at once (it then falls back to HTTP without retrying), a
    401 first for a missing or wrong key, in the OpenAI error shape; a plain GET stays a 405."""
    with httpx.Client(base_url=stack.url, timeout=30) as client:
        r = client.get("/v1/responses", headers={**UPGRADE, **AUTH})
        assert r.status_code == 426, r.text
        assert r.json()["error"]["type"] == "invalid_request_error"
        assert r.json()["error"]["code"] == "websocket_not_supported"
        for auth in ({}, {"Authorization": "Bearer wrong"}):
            r = client.get("/v1/responses", headers={**UPGRADE, **auth})
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key", r.text
        r = client.get("/v1/responses", headers=AUTH)
        assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
        # the endpoint serves no /responses without /v1 (a POST there is a 404 too): not an alias
        assert client.get("/responses", headers={**UPGRADE, **AUTH}).status_code == 404
        # the HTTP route is untouched
        r = client.post("/v1/responses", json={"model": "demo", "input": "U1", "max_output_tokens": 2}, headers=AUTH)
        assert r.status_code == 200, r.text


# ------------------------------------------------------------------------------------------ B74


def test_b74_requests_without_model_follow_their_conversation(stack: Stack) -> None:
    """With two models, a request without ``model`` goes to its conversation's model (its opening,
    its session key), else the only loaded model, else ``server.default_model``; never a swap."""
    u1 = {"role": "user", "content": "Name three prime numbers."}
    a1 = {"role": "assistant", "content": "2, 3 and 5."}
    u2 = {"role": "user", "content": "And three more?"}
    # Responses: turn 1 names demo (not the default); turn 2 carries the history and no model
    first = post(stack, "/v1/responses", {"model": "demo", "input": [u1], "max_output_tokens": 8})
    assert first.status_code == 200, first.text
    body = {"input": [u1, a1, u2], "max_output_tokens": 8}
    for headers in (AUTH, {**AUTH, "session_id": "codex-session-1"}):
        r = post(stack, "/v1/responses", body, headers)
        assert r.status_code == 200, r.text
        assert r.json()["model"] == "demo"  # its conversation's, not the default demo-b
        assert r.json()["usage"]["input_tokens_details"]["cached_tokens"] > 0  # turn 1's prefix reused
    # prompt_cache_key (and Codex's session_id header) name a conversation whatever its opening says
    keyed = {"model": "demo", "input": "First turn.", "prompt_cache_key": "codex-2", "max_output_tokens": 4}
    assert post(stack, "/v1/responses", keyed).status_code == 200
    later = {"input": "Another opening entirely.", "max_output_tokens": 4}
    r = post(stack, "/v1/responses", {**later, "prompt_cache_key": "codex-2"})
    assert r.status_code == 200 and r.json()["model"] == "demo", r.text
    r = post(stack, "/v1/responses", later, {**AUTH, "session_id": "codex-2"})
    assert r.status_code == 200 and r.json()["model"] == "demo", r.text
    # chat completions and Messages: the same conversation, without model
    chat = post(stack, "/v1/chat/completions", {"messages": [u1, a1, u2], "max_tokens": 4})
    assert chat.status_code == 200 and chat.json()["model"] == "demo", chat.text
    session = {**ANTHROPIC, "X-Claude-Code-Session-Id": "claude-1"}
    opening = {"model": "demo", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi."}]}
    assert post(stack, "/v1/messages", opening, session).status_code == 200
    follow = {"max_tokens": 4, "messages": [{"role": "user", "content": "Something else."}]}
    r = post(stack, "/v1/messages", follow, session)
    assert r.status_code == 200 and r.json()["model"] == "demo", r.text
    # a new conversation: both models are loaded, so server.default_model decides
    fresh = {"input": "A new conversation.", "max_output_tokens": 4}
    r = post(stack, "/v1/responses", fresh)
    assert r.status_code == 200 and r.json()["model"] == "demo-b", r.text
    # with demo-b unloaded, the one loaded model serves a new conversation, and nothing loads demo-b
    assert httpx.post(stack.url + "/models/unload", json={"model": "demo-b"}, headers=AUTH, timeout=120).is_success
    r = post(stack, "/v1/responses", {"input": "Yet another one.", "max_output_tokens": 4})
    assert r.status_code == 200 and r.json()["model"] == "demo", r.text
    r = post(stack, "/v1/chat/completions", {"messages": [u1, a1, u2], "max_tokens": 4})
    assert r.status_code == 200 and r.json()["model"] == "demo", r.text
    states = {m["id"]: m["state"] for m in httpx.get(stack.url + "/v1/models", headers=AUTH).json()["data"]}
    assert states["demo-b"] == "unloaded", states
    assert httpx.post(stack.url + "/models/load", json={"model": "demo-b"}, headers=AUTH, timeout=120).is_success


# ------------------------------------------------------------------------------------------ B72


def test_b72_stored_responses_continue_with_their_cache(stack: Stack) -> None:
    """``store: true`` keeps the response; ``previous_response_id`` continues it (only the new turn
    is processed) on its model; GET, input_items and DELETE work; gone is a 404 in OpenAI's shape;
    the stored file is read back by a new store on the same state folder (a restart)."""
    turn1 = {"model": "demo", "input": "Tell me about the sea in a few words.", "store": True,
             "max_output_tokens": 8}  # fmt: skip
    r1 = post(stack, "/v1/responses", turn1)
    assert r1.status_code == 200, r1.text
    first = r1.json()
    assert first["store"] is True and first["id"].startswith("resp_")
    got = httpx.get(f"{stack.url}/v1/responses/{first['id']}", headers=AUTH)
    assert got.status_code == 200 and got.json()["output"] == first["output"]
    # turn 2 names no model and sends only its new message
    turn2 = {"previous_response_id": first["id"], "input": "And the sky?", "store": True, "max_output_tokens": 8}
    r2 = post(stack, "/v1/responses", turn2)
    assert r2.status_code == 200, r2.text
    second = r2.json()
    assert second["model"] == "demo" and second["store"] is True
    before, now = first["usage"], second["usage"]
    new = now["input_tokens"] - before["input_tokens"] - before["output_tokens"]
    assert processed(now) <= max(0, new) + 64, (before, now)  # the earlier turn came from the cache
    assert now["input_tokens_details"]["cached_tokens"] >= before["input_tokens"] - 8, (before, now)
    items = httpx.get(f"{stack.url}/v1/responses/{second['id']}/input_items", headers=AUTH).json()
    texts = [json.dumps(i) for i in items["data"]]
    assert "the sea" in texts[0] and "the sky" in texts[-1] and len(texts) == 3, texts  # U1, A1, U2
    # streamed, with Codex's include: stored at its completed event
    streamed = {**turn1, "stream": True, "include": ["reasoning.encrypted_content"]}
    with httpx.stream("POST", stack.url + "/v1/responses", json=streamed, headers=AUTH, timeout=120) as s:
        events = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: ")]
    done = next(e["response"] for e in events if e["type"] == "response.completed")
    assert done["store"] is True
    assert httpx.get(f"{stack.url}/v1/responses/{done['id']}", headers=AUTH).status_code == 200
    # a restart: a new store on the same state folder reads them back
    from orchestrator.config.schema import ResponsesStoreConfig
    from orchestrator.serve.responses.stored import ResponseStore

    folder = Path(os.environ["ORCHESTRATOR_STATE"]) / "responses"
    reread = ResponseStore(folder, ResponsesStoreConfig)
    assert {first["id"], second["id"], done["id"]} <= {p.stem for p in folder.glob("*.json")}
    kept = reread.get(second["id"])
    assert kept is not None and kept.model == "demo" and kept.response["output"] == second["output"]
    # store false and absent keep nothing, as before
    for store in ({"store": False}, {}):
        r = post(stack, "/v1/responses", {"model": "demo", "input": "U1", "max_output_tokens": 2, **store})
        assert r.status_code == 200 and r.json().get("store") is not True, r.text
        assert httpx.get(f"{stack.url}/v1/responses/{r.json()['id']}", headers=AUTH).status_code == 404
    # DELETE, then it is gone everywhere
    gone = httpx.delete(f"{stack.url}/v1/responses/{first['id']}", headers=AUTH)
    assert gone.status_code == 200 and gone.json() == {"id": first["id"], "object": "response", "deleted": True}
    for r in (
        httpx.get(f"{stack.url}/v1/responses/{first['id']}", headers=AUTH),
        post(stack, "/v1/responses", {**turn2, "previous_response_id": first["id"]}),
        post(stack, "/v1/responses", {"model": "demo", "input": "U1", "previous_response_id": "resp_1"}),
    ):
        assert r.status_code == 404, r.text
        assert r.json()["error"]["type"] == "not_found_error" and r.json()["error"]["code"] == "response_not_found"
    assert httpx.get(f"{stack.url}/v1/responses/{second['id']}").status_code == 401  # behind the keys


# ------------------------------------------------------------------------------------------ B75


def test_b75_suffix_without_fim_tokens_is_a_400_and_best_of_is_checked(stack: Stack) -> None:
    """The echo model's vocabulary has no fill-in-the-middle tokens: ``suffix`` is a 400 naming it,
    streamed or not (never a silent plain continuation); an empty or null suffix is none;
    ``best_of`` 1 is a no-op, more a 400 naming it."""
    body = {"model": "demo", "prompt": "def f(x):\n    ", "suffix": "\n    return y\n", "max_tokens": 16,
            "temperature": 0}  # fmt: skip
    for stream in (False, True):
        r = post(stack, "/v1/completions", {**body, "stream": stream})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "suffix" and r.json()["error"]["code"] == "fim_not_supported"
    for ok in ({"suffix": ""}, {"suffix": None}, {"best_of": 1, "suffix": None}):
        r = post(stack, "/v1/completions", {**body, **ok})
        assert r.status_code == 200 and r.json()["choices"][0]["text"], r.text
    r = post(stack, "/v1/completions", {**body, "best_of": 2, "suffix": None})
    assert r.status_code == 400 and r.json()["error"]["param"] == "best_of", r.text


# ------------------------------------------------------------------------------------------ B70


def test_b70_anthropic_max_tokens_0_prewarms_the_cache(stack: Stack) -> None:
    """``max_tokens: 0``: 200, no content, stop_reason max_tokens, 0 output tokens, and the system
    prompt cached for the next request; streamed or with thinking enabled it is a 400."""
    system = [{"type": "text", "text": S0, "cache_control": {"type": "ephemeral"}}]
    warm = {"model": "demo", "max_tokens": 0, "system": system, "messages": [{"role": "user", "content": "warmup"}]}
    r = post(stack, "/v1/messages", warm, ANTHROPIC)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["content"] == [] and answer["stop_reason"] == "max_tokens", answer
    usage = answer["usage"]
    assert usage["output_tokens"] == 0 and usage["input_tokens"] + usage.get("cache_read_input_tokens", 0) > 1000
    follow = {**warm, "max_tokens": 16, "messages": [{"role": "user", "content": "U1"}]}
    r = post(stack, "/v1/messages", follow, ANTHROPIC)
    assert r.status_code == 200, r.text
    warmed = usage["input_tokens"] + usage.get("cache_read_input_tokens", 0)
    assert r.json()["usage"]["cache_read_input_tokens"] >= warmed - 16, (usage, r.json()["usage"])  # all but the turn
    for extra in ({"stream": True}, {"thinking": {"type": "enabled", "budget_tokens": 1024}}):
        r = post(stack, "/v1/messages", {**warm, **extra}, ANTHROPIC)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["type"] == "invalid_request_error" and "max_tokens" in r.json()["error"]["message"]
    # chat keeps refusing 0 (llama-server would still generate one token): a 400 naming it
    chat = {"model": "demo", "max_tokens": 0, "messages": [{"role": "system", "content": S0},
                                                          {"role": "user", "content": "warmup"}]}  # fmt: skip
    r = post(stack, "/v1/chat/completions", chat)
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens", r.text
