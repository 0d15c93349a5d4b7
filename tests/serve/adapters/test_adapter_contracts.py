"""The seam between the shared request path and the API folders, driven without any llama-server.

Part one drives every adapter as a value: what it declares (shape, whether it generates, its chat
view, session key, error prefix), its translation to the internal request, the internal route's
repair, its error shapes. Part two drives :class:`~orchestrator.serve.pipeline.ProxyRequest`
through the real app for each API against a fake upstream that records what reached it and
answers in llama-server's shape: the upstream path and body the API's translation makes, the
answer back in the API's shape, and an upstream failure in the API's error shape.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import FakeUpstream, Stack, chat_completion
from supervision_helpers import fake_spec

from orchestrator.config.schema import Config, ModelConfig, ServerConfig
from orchestrator.errors import ApiError
from orchestrator.serve.adapters.base import Adapter, Call
from orchestrator.serve.adapters.plan import BodyPlan
from orchestrator.serve.adapters.route import Route
from orchestrator.serve.app import served_by
from orchestrator.serve.http.shapes import Shape
from orchestrator.serve.registry import ADAPTERS, adapter_for, error_body, for_path
from orchestrator.serve.repair.chat import RepairPolicy

MODEL = ModelConfig(name="demo", path="/unused.gguf")
USER = [{"role": "user", "content": "Hi"}]
# one minimal valid body per forwarded route, in that route's API
BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "demo", "messages": USER},
    "/v1/completions": {"model": "demo", "prompt": "Hi"},
    "/v1/embeddings": {"model": "demo", "input": "Hi"},
    "/v1/messages": {"model": "demo", "max_tokens": 8, "system": "Be brief.", "messages": USER},
    "/v1/messages/count_tokens": {"model": "demo", "messages": USER},
    "/v1/responses": {"model": "demo", "instructions": "Be brief.", "input": "Hi"},
    "/v1/responses/input_tokens": {"model": "demo", "input": "Hi"},
    "/v1/responses/compact": {"model": "demo", "input": [{"role": "user", "content": "Hi"}]},
    "/v1/chat/completions/input_tokens": {"model": "demo", "messages": USER},
    "/apply-template": {"model": "demo", "messages": USER},
    "/infill": {"model": "demo", "input_prefix": "a", "input_suffix": "b"},
    "/v1/rerank": {"model": "demo", "query": "q", "documents": ["a"]},
    "/tokenize": {"model": "demo", "content": "Hi"},
    "/detokenize": {"model": "demo", "tokens": [1, 2]},
    "/api/chat": {"model": "demo", "messages": USER, "stream": False},
    "/api/generate": {"model": "demo", "prompt": "Hi", "stream": False},
    "/api/embed": {"model": "demo", "input": "Hi"},
}


def test_every_route_has_one_adapter_and_a_body_case() -> None:
    paths = [a.path for a in ADAPTERS]
    assert len(paths) == len(set(paths)) and set(paths) == set(BODIES)


def test_an_adapter_is_its_apis_side_and_a_route_llama_servers_no_object_is_both() -> None:
    """The client's side (answer, stream and error shapes) and llama-server's side (checks,
    repairs, session key, render) are two kinds of object: Ollama's chat ends on OpenAI's chat
    route itself, not on OpenAI's chat adapter."""
    for adapter in ADAPTERS:
        assert isinstance(adapter.route, Route) and not isinstance(adapter, Route), adapter.path
        for name in ("prepare", "stream_repair", "chat_request", "chat_of", "session_key", "upstream_error"):
            assert not hasattr(adapter, name), (adapter.path, name)
        for name in ("whole", "codec", "error_body", "stream_error", "open"):
            assert not hasattr(adapter.route, name), (adapter.route.path, name)
    by_path = {a.path: a for a in ADAPTERS}
    assert by_path["/api/chat"].route is by_path["/v1/chat/completions"].route
    assert by_path["/api/embed"].route is by_path["/v1/embeddings"].route


@pytest.mark.parametrize("path", sorted(BODIES))
def test_each_adapter_opens_a_call_that_prepares_and_declares(path: str) -> None:
    adapter = adapter_for(path)
    assert adapter is not None and adapter.kind and isinstance(adapter.shape, Shape), path
    body = BODIES[path]
    call = adapter.open(body, json.dumps(body).encode())
    assert isinstance(call, Call) and call.api is adapter, path  # the API that answers its client
    internal = call.internal
    registered = adapter_for(internal.path)  # the internal route is one of llama-server's, served as such
    assert registered is not None and call.route.path == internal.path, path
    assert type(call.route) is type(registered.route), path
    plan = call.prepare(MODEL, RepairPolicy())
    assert isinstance(plan, BodyPlan) and call.answer_fix is plan.answer_fix
    chat_of = call.chat_of()
    if chat_of is not None:  # prefix affinity renders this route's prompt in-process
        chat = chat_of(plan.current(call.body))
        assert isinstance(chat["messages"], list) and chat["messages"][-1]["role"] == "user", path
    # only generating routes reach the draft-length policy
    assert call.generates == (call.route.kind in ("chat", "completions", "messages", "responses", "infill"))


def test_the_internal_route_of_each_api() -> None:
    routes = {a.path: a.open(BODIES[a.path], b"").route.path for a in ADAPTERS}
    assert routes["/api/chat"] == "/v1/chat/completions" and routes["/api/embed"] == "/v1/embeddings"
    assert routes["/api/generate"] == "/v1/chat/completions"
    for own in ("/v1/messages", "/v1/responses", "/v1/chat/completions", "/infill"):
        assert routes[own] == own  # llama-server serves these itself


def test_chat_views_of_anthropic_and_responses_put_the_system_text_first() -> None:
    for path in ("/v1/messages", "/v1/responses"):
        adapter = adapter_for(path)
        assert adapter is not None
        route = adapter.route
        plan = route.prepare(BODIES[path], MODEL, RepairPolicy())
        chat_of = route.chat_of()
        assert chat_of is not None
        chat = chat_of(plan.current(BODIES[path]))
        assert chat["messages"][0] == {"role": "system", "content": "Be brief."}, path


def test_session_keys_are_each_apis_own_field() -> None:
    claude = {"metadata": {"user_id": '{"session_id":"abc"}'}}
    assert adapter_for("/v1/messages").route.session_key(claude) == "s:abc"  # type: ignore[union-attr]
    assert adapter_for("/v1/responses").route.session_key(claude) is None  # type: ignore[union-attr]
    assert adapter_for("/v1/chat/completions").route.session_key({"prompt_cache_key": "x"}) == "k:x"  # type: ignore[union-attr]


def test_error_shapes_by_path_prefix() -> None:
    err = ApiError(400, "bad thing", param="messages")
    assert error_body("/v1/chat/completions", err)["error"]["message"] == "bad thing"
    assert error_body("/v1/messages/count_tokens", err)["type"] == "error"
    assert isinstance(error_body("/api/tags", err)["error"], str)
    assert type(for_path("/v1/responses")) is Adapter  # Responses errors are OpenAI's
    for adapter in ADAPTERS:  # a stream whose head went out ends with the API's error event
        tail = adapter.stream_error(err)
        assert b"bad thing" in tail, adapter.path


# --- part two: ProxyRequest through the app, a fake upstream in llama-server's shape ---------------


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    config = Config(server=ServerConfig(), models=[ModelConfig(name="demo", path="/unused.gguf")])
    s = Stack(config, [fake_spec()], tmp_path / "logs")
    yield s
    s.close()


def _answer(path: str) -> dict[str, Any]:
    if path == "/v1/messages":
        return {
            "id": "chatcmpl-abc",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": "Hello"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 1},
        }
    if path == "/v1/responses":
        return {
            "id": "resp_1",
            "object": "response",
            "status": "completed",
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello"}]}],
        }
    return chat_completion("Hello")


def _recording(stack: Stack, status: int = 200) -> tuple[FakeUpstream, list[tuple[str, dict[str, Any]]]]:
    seen: list[tuple[str, dict[str, Any]]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            path = head.split(b" ")[1].decode()
            length = next(
                int(v)
                for k, _, v in (ln.partition(b":") for ln in head.split(b"\r\n"))
                if k.lower() == b"content-length"
            )
            body = json.loads(await reader.readexactly(length))
            seen.append((path, body))
            answer = (
                {"error": {"code": 500, "message": "boom", "type": "server_error"}} if status >= 400 else _answer(path)
            )
            await FakeUpstream.write_json(writer, answer, status)

    fake = FakeUpstream(stack, handler)
    stack.point_at(fake.url)
    return fake, seen


def test_proxy_request_per_api_against_a_fake_upstream(stack: Stack) -> None:
    _fake, seen = _recording(stack)
    with httpx.Client(base_url=stack.url, timeout=30) as client:
        r = client.post("/v1/messages", json=BODIES["/v1/messages"])
        assert r.status_code == 200 and r.json()["id"] == "msg_abc", r.text  # Anthropic's id, not llama-server's
        path, body = seen[-1]
        assert path == "/v1/messages" and body["system"] == "Be brief."
        r = client.post("/v1/responses", json=BODIES["/v1/responses"])
        assert r.status_code == 200 and r.json()["output"][0]["content"][0]["text"] == "Hello", r.text
        assert seen[-1][0] == "/v1/responses"
        r = client.post("/api/chat", json=BODIES["/api/chat"])
        assert r.status_code == 200 and r.json()["message"]["content"] == "Hello" and r.json()["done"] is True, r.text
        path, body = seen[-1]
        assert path == "/v1/chat/completions" and body["messages"][-1]["content"] == "Hi"  # Ollama onto OpenAI chat
        r = client.post("/v1/chat/completions", json=BODIES["/v1/chat/completions"])
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "Hello"


def test_an_upstream_failure_reaches_each_api_in_its_error_shape(stack: Stack) -> None:
    _fake, _seen = _recording(stack, status=503)
    with httpx.Client(base_url=stack.url, timeout=30) as client:
        anthropic = client.post("/v1/messages", json=BODIES["/v1/messages"])
        assert anthropic.status_code >= 500 and anthropic.json()["type"] == "error", anthropic.text
        ollama = client.post("/api/chat", json=BODIES["/api/chat"])
        assert ollama.status_code >= 500 and isinstance(ollama.json()["error"], str), ollama.text
        openai = client.post("/v1/chat/completions", json=BODIES["/v1/chat/completions"])
        assert openai.status_code >= 500 and isinstance(openai.json()["error"]["message"], str), openai.text


def test_the_prompt_cache_follows_a_reloaded_disk_budget(stack: Stack) -> None:
    cache = served_by(stack.app).router.prompt_cache
    assert cache.kv.store.budget == stack.config.server.kv_disk_budget
    reloaded = stack.config.model_copy(update={"server": ServerConfig(kv_disk_budget=12345)})
    stack.supervisor.running.swap(reloaded)
    cache._follow_config()  # what every save and every watch tick does first
    assert cache.kv.store.budget == 12345


def test_a_responses_request_maps_its_tools_once(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """The request side's tool map reaches the answer side (``BodyPlan.answer_fix``): Codex's namespace
    tools were mapped by the repair, the whole answer's fix and the log of skipped tools, each anew."""
    from orchestrator.serve.responses import answer as responses_answer
    from orchestrator.serve.responses import repair as responses_repair

    calls: list[Any] = []
    real = responses_repair.map_tools

    def counting(tools: Any) -> Any:
        calls.append(tools)
        return real(tools)

    monkeypatch.setattr(responses_repair, "map_tools", counting)
    monkeypatch.setattr(responses_answer, "map_tools", counting)
    _fake, seen = _recording(stack)
    namespace = {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "f", "parameters": {}}]}
    body = {**BODIES["/v1/responses"], "tools": [namespace, {"type": "web_search"}]}
    with httpx.Client(base_url=stack.url, timeout=30) as client:
        r = client.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    assert [t["name"] for t in seen[-1][1]["tools"]] == ["ns.f"]  # mapped; the hosted tool left out
    assert len(calls) == 1


def test_a_prompt_that_cannot_fit_is_refused_before_any_replica_sees_it(stack: Stack) -> None:
    """Four 10 MB prompts at once: each a 400 context_length_exceeded in its API's shape, within a second,
    and not one byte reaches the replica (llama-server tokenized such a prompt for 6 s, and four at
    once grew it to 3.5 GB)."""
    _fake, seen = _recording(stack)
    huge = "word " * (2 * 1024 * 1024)  # 10 MB of text: far more than 4096 tokens of 256 bytes each

    async def four() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=stack.url, timeout=30) as client:
            chat = {"model": "demo", "messages": [{"role": "user", "content": huge}]}
            messages = {"model": "demo", "max_tokens": 8, "messages": [{"role": "user", "content": huge}]}
            return list(
                await asyncio.gather(
                    client.post("/v1/chat/completions", json=chat),
                    client.post("/v1/chat/completions", json={**chat, "stream": True}),
                    client.post("/v1/messages", json=messages),
                    client.post("/v1/responses", json={"model": "demo", "input": huge}),
                )
            )

    started = time.monotonic()
    answers = asyncio.run(four())
    assert time.monotonic() - started < 8  # four 10 MB bodies read, parsed and refused on a 2-core machine
    for r in answers:
        assert r.status_code == 400, r.text[:300]
        assert "prompt is too long" in r.text and "4096 maximum" in r.text
    assert answers[0].json()["error"]["code"] == "context_length_exceeded"
    assert answers[2].json()["type"] == "error"  # Anthropic's shape for Claude Code
    assert seen == []


def _slow_head(stack: Stack, wait_s: float) -> FakeUpstream:
    """A replica whose slots are all busy: it sends the response head only after ``wait_s`` seconds
    (llama-server sends its head when a slot takes the request), then a short stream."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await fake.read_request(reader)
        await asyncio.sleep(wait_s)
        await fake.write_sse_head(writer)
        await fake.write_chunk(writer, b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n')
        await fake.write_chunk(writer, b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n')
        await fake.write_chunk(writer, b"data: [DONE]\n\n")
        await fake.end_chunks(writer)

    fake = FakeUpstream(stack, handler)
    stack.point_at(fake.url)
    return fake


def _arrivals(stack: Stack, path: str, body: dict[str, Any]) -> list[tuple[float, bytes]]:
    """When each piece of a streamed answer arrived (s after sending) and what it was."""
    out: list[tuple[float, bytes]] = []
    started = time.monotonic()
    with httpx.stream("POST", stack.url + path, json=body, timeout=30) as r:
        out.append((time.monotonic() - started, b"HEAD %d" % r.status_code))
        for piece in r.iter_raw():
            out.append((time.monotonic() - started, piece))
    return out


def test_a_stream_queued_for_a_slot_is_never_silent(tmp_path: Path) -> None:
    """Queued behind busy slots, a stream gets its head within a second or two and a keepalive in its
    API's framing every server.timeouts.keepalive seconds (here 1), not silence until a slot frees."""
    config = Config(
        server=ServerConfig(timeouts={"keepalive": 1.0}), models=[ModelConfig(name="demo", path="/unused.gguf")]
    )
    s = Stack(config, [fake_spec()], tmp_path / "logs")
    try:
        _slow_head(s, 6.0)  # bounds below leave seconds of slack for a loaded machine, and still tell
        chat = _arrivals(s, "/v1/chat/completions", {**BODIES["/v1/chat/completions"], "stream": True})
        assert chat[0][0] < 3.0 and chat[0][1] == b"HEAD 200"  # the first byte: at about 1 s, not 6
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(chat)]
        assert max(gaps) < 3.0, chat  # never more than a keepalive (+ slack) of silence, not 6 s
        text = b"".join(p for _, p in chat[1:])
        assert b": waiting for a free slot\n\n" in text and text.endswith(b"data: [DONE]\n\n") and b'"Hi"' in text
        ollama = _arrivals(s, "/api/chat", {**BODIES["/api/chat"], "stream": True})
        assert ollama[0][0] < 3.0
        lines = [json.loads(x) for x in b"".join(p for _, p in ollama[1:]).splitlines()]
        assert lines[0]["message"]["content"] == "" and lines[0]["done"] is False  # NDJSON's keepalive
        assert lines[-1]["done"] is True and "".join(x["message"]["content"] for x in lines) == "Hi"
    finally:
        s.close()


def test_a_whole_answer_cut_after_work_may_have_started_is_a_502_not_a_silent_rerun(stack: Stack) -> None:
    """A replica that takes a non-streamed request and dies without an answer after RESEND_WITHIN_S
    may have been working on it (its head comes only with the answer): the client gets 502
    upstream_died with Retry-After, and the request is not run again behind its back."""
    from orchestrator.serve.pipeline import RESEND_WITHIN_S

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await fake.read_request(reader)
        await asyncio.sleep(RESEND_WITHIN_S + 1.0)  # "working" ... then the connection drops

    fake = FakeUpstream(stack, handler)
    stack.point_at(fake.url)
    r = httpx.post(stack.url + "/v1/chat/completions", json=BODIES["/v1/chat/completions"], timeout=60)
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_died", r.text
    assert r.headers.get("retry-after") is not None
    assert len(fake.requests) == 1  # not resent


def test_media_embeddings_and_counts_are_not_refused_as_too_long(stack: Stack) -> None:
    """Only one generating prompt's text counts against the slot: a 1.6 MB base64 image is a few
    hundred tokens, 600 embedding inputs are embedded one by one, a count answers how long it is."""
    _fake, seen = _recording(stack)
    image = "data:image/png;base64," + "A" * 1_600_000
    parts = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": image}}]
    with httpx.Client(base_url=stack.url, timeout=30) as client:
        r = client.post(
            "/v1/chat/completions", json={"model": "demo", "messages": [{"role": "user", "content": parts}]}
        )
        assert "prompt is too long" not in r.text
        r = client.post("/v1/embeddings", json={"model": "demo", "input": ["x" * 2000] * 600})
        assert "prompt is too long" not in r.text
        r = client.post("/tokenize", json={"model": "demo", "content": "word " * 240_000})
        assert "prompt is too long" not in r.text
    assert {path for path, _ in seen} >= {"/v1/embeddings", "/tokenize"}  # they reached the replica


def test_codex_remote_compaction_round_trip(stack: Stack) -> None:
    """``POST /v1/responses/compact`` asks the model for the summary and answers one compaction item
    after the user messages; a later request that replays the item has the summary in its prompt."""
    _fake, seen = _recording(stack)
    history = [
        {"role": "user", "content": "Fix the failing test"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
    ]
    with httpx.Client(base_url=stack.url, timeout=30) as client:
        r = client.post("/v1/responses/compact", json={"model": "demo", "input": history})
        assert r.status_code == 200, r.text
        compacted = r.json()
        path, asked = seen[-1]
        assert path == "/v1/responses" and asked["stream"] is False  # the model itself writes the summary
        assert "Summarize the conversation" in json.dumps(asked["input"][-1])
        assert compacted["object"] == "response.compaction"
        *users, item = compacted["output"]
        assert [u["content"][0]["text"] for u in users] == ["Fix the failing test"]
        assert item["type"] == "compaction" and item["encrypted_content"]
        later = [*compacted["output"], {"role": "user", "content": "Now run it"}]
        r = client.post("/v1/responses", json={"model": "demo", "input": later})
        assert r.status_code == 200, r.text
        replayed = json.dumps(seen[-1][1]["input"])
        assert "Hello" in replayed and "conversation_summary" in replayed  # the fake's answer text, as the summary
