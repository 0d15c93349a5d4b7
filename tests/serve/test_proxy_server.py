"""The proxy end to end against real llama-servers (tiny echo model), run by the real Supervisor.

Every request in ``tests/data/chat_requests.json`` (C01-C09) goes through the app served by
uvicorn; the recording tap (an httpx request hook on the proxy's upstream clients) shows the exact
body that reached llama-server. Clients are the official ``openai`` SDK and plain httpx.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from proxy_harness import Stack, real_stack

from orchestrator.serve.app import served_by

pytestmark = [pytest.mark.native, pytest.mark.slow]

CASES = json.loads((Path(__file__).resolve().parents[1] / "data" / "chat_requests.json").read_text())["cases"]
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    s = real_stack(tmp_path_factory.mktemp("stack"), echo_model, bin_info)
    yield s
    s.close()


@pytest.fixture
def rec(stack: Stack) -> Any:
    stack.recorder.clear()
    return stack.recorder


def client(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def metric(stack: Stack, name: str, **labels: str) -> float:
    text = httpx.get(stack.url + "/metrics").text
    want = "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    for line in text.splitlines():
        if line.startswith(name + want + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_chat_request_cases(stack: Stack, rec: Any, case: dict[str, Any]) -> None:
    """C01-C09: the exact upstream body and a 200 from the real server, or the error and no call."""
    body = {**case["input"], "max_tokens": 4}
    raw = json.dumps(body).encode()
    r = httpx.post(
        stack.url + "/v1/chat/completions", content=raw, headers={"content-type": "application/json"}, timeout=60
    )
    assert r.status_code == case["expect_status"], r.text
    if case["expect_status"] != 200:
        error = r.json()["error"]
        for key, value in case["expect_error"].items():
            assert error[key] == value
        assert rec.requests == []  # expect_upstream_called: false
        return
    assert r.json()["object"] == "chat.completion"
    [(path, sent, state)] = rec.requests
    assert path == "/v1/chat/completions" and state == "ready"
    upstream = json.loads(sent)
    # prefix affinity pins a prompt to a slot of this 2-slot model: that is routing, not repair, so it
    # is checked for its type and left out of the comparison
    slot = upstream.pop("id_slot", None)
    assert slot is None or isinstance(slot, int)
    if "upstream_messages" in case:
        assert upstream == {**body, "messages": case["upstream_messages"]}
    if "expect_upstream_body_has" in case:
        for key, value in case["expect_upstream_body_has"].items():
            assert upstream[key] == value
        for key in case["expect_upstream_body_lacks"]:
            assert key not in upstream
        assert upstream["messages"] == body["messages"]
    if case.get("expect_upstream_messages_unchanged"):
        # forwarded byte for byte, not re-serialised: affinity appends its slot to the client's bytes
        assert sent == (raw if slot is None else raw[:-1] + f',"id_slot":{slot}}}'.encode())


def test_openai_client_non_streamed_and_streamed_agree(stack: Stack, rec: Any) -> None:
    c = client(stack)
    messages = [{"role": "user", "content": "Name three colours."}]
    whole = c.chat.completions.create(
        model="demo", messages=messages, max_tokens=12, temperature=0, extra_body=NO_THINK
    )
    text = whole.choices[0].message.content
    assert text and whole.usage is not None and whole.usage.completion_tokens == 12
    pieces = []
    for chunk in c.chat.completions.create(
        model="tiny", messages=messages, max_tokens=12, temperature=0, stream=True, extra_body=NO_THINK
    ):
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
    assert "".join(pieces) == text  # greedy echo model: same text, streamed event by event
    assert len([p for p in pieces if p]) > 1
    assert [json.loads(b)["model"] for _, b, _ in rec.requests] == ["demo", "tiny"]  # model is never rewritten


def test_stream_headers_events_and_done(stack: Stack) -> None:
    body = {
        "model": "demo",
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 6,
        "stream": True,
        **NO_THINK,
    }
    with httpx.stream(
        "POST", stack.url + "/v1/chat/completions", json=body, headers={"accept-encoding": "gzip"}, timeout=60
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "text/event-stream"
        assert r.headers["cache-control"] == "no-cache"
        assert r.headers["x-accel-buffering"] == "no"
        assert "content-encoding" not in r.headers
        raw = r.read()
    events = [e for e in raw.split(b"\n\n") if e]
    assert all(e.startswith(b"data: ") for e in events)
    assert events[-1] == b"data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert chunks[-1]["timings"]["predicted_n"] == 6


def test_completions_streamed_and_not_with_draft_length_translation(stack: Stack, rec: Any) -> None:
    c = client(stack)
    whole = c.completions.create(
        model="demo", prompt="Once upon", max_tokens=8, temperature=0, extra_body={"speculative": {"n_max": 2}}
    )
    streamed = "".join(
        ch.choices[0].text
        for ch in c.completions.create(model="demo", prompt="Once upon", max_tokens=8, temperature=0, stream=True)
        if ch.choices
    )
    assert whole.choices[0].text and streamed == whole.choices[0].text
    first = rec.bodies("/v1/completions")[0]
    assert first["speculative.n_max"] == 2 and "speculative" not in first


def test_embeddings_pass_through(stack: Stack, rec: Any) -> None:
    result = client(stack).embeddings.create(model="demo", input="hello")
    assert len(result.data[0].embedding) > 0
    assert rec.bodies("/v1/embeddings") == [{"model": "demo", "input": "hello", "encoding_format": "base64"}]


def test_metrics_show_drafted_and_accepted_tokens(stack: Stack) -> None:
    before = metric(stack, "orchestrator_draft_tokens_total", model="demo")
    client(stack).chat.completions.create(
        model="demo",
        messages=[{"role": "user", "content": "Count to ten"}],
        max_tokens=16,
        temperature=0,
        extra_body=NO_THINK,
    )
    drafted = metric(stack, "orchestrator_draft_tokens_total", model="demo")
    accepted = metric(stack, "orchestrator_draft_accepted_tokens_total", model="demo")
    assert drafted > before
    assert 0 < accepted <= drafted
    assert 0 < metric(stack, "orchestrator_draft_acceptance_rate", model="demo") <= 1
    # a stream's counts come from its last event
    list(
        client(stack).chat.completions.create(
            model="demo",
            messages=[{"role": "user", "content": "More"}],
            max_tokens=16,
            temperature=0,
            stream=True,
            extra_body=NO_THINK,
        )
    )
    assert metric(stack, "orchestrator_draft_tokens_total", model="demo") > drafted
    assert metric(stack, "orchestrator_requests_total", endpoint="chat", model="demo", status="200") >= 2
    assert metric(stack, "orchestrator_completion_tokens_total", model="demo") >= 32
    assert metric(stack, "orchestrator_instance_state", instance="demo-0", model="demo", state="ready") == 1
    # the supervisor's drafting check got the timings too (S03)
    assert stack.supervisor.instances[0].speculation == "active"


def slots_busy(stack: Stack) -> bool:
    return decoding(stack) is not None


def decoding(stack: Stack) -> int | None:
    """Tokens generated so far by the slot that is processing (llama-server's ``/slots``), None when idle."""
    base = stack.supervisor.instances[0].base_url
    busy = [s for s in httpx.get(f"{base}/slots", timeout=5).json() if s.get("is_processing")]
    if not busy:
        return None
    return max(int(s.get("next_token", [{}])[0].get("n_decoded", 0)) for s in busy)


def test_client_disconnect_stops_generation_and_frees_the_slot(stack: Stack) -> None:
    """A client that leaves mid-stream cancels the upstream request: llama-server stops long before
    ``max_tokens`` and frees the slot. Judged by tokens generated, not by a wall-clock bound (a busy
    machine slows the check down, not the cancellation)."""
    max_tokens = 3900
    body = {
        "model": "demo",
        "messages": [{"role": "user", "content": "Go on"}],
        "max_tokens": max_tokens,
        "stream": True,
        "temperature": 0,
        **NO_THINK,
    }
    with httpx.stream("POST", stack.url + "/v1/chat/completions", json=body, timeout=60) as r:
        chunks = r.iter_raw()  # kept referenced: abandoning the iterator would close the stream early
        for _ in range(3):
            next(chunks)
        assert slots_busy(stack)
    # leaving the block closed the client connection mid-stream
    give_up = time.monotonic() + 120  # only so a regression fails instead of hanging
    last_seen = 0
    while (n := decoding(stack)) is not None:
        last_seen = n
        assert time.monotonic() < give_up, f"llama-server still generating ({n} tokens) 120 s after the client left"
        time.sleep(0.02)
    assert last_seen < max_tokens // 2, (
        f"llama-server generated {last_seen} of {max_tokens} tokens after the disconnect"
    )
    deadline = time.monotonic() + 2
    while stack.supervisor.instances[0].in_flight and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stack.supervisor.instances[0].in_flight == 0


def test_ops_routes(stack: Stack) -> None:
    health = httpx.get(stack.url + "/health")
    assert health.status_code == 200
    assert health.json()["models"]["demo"]["ready"] is True
    status = httpx.get(stack.url + "/status").json()["instances"]
    assert [row["name"] for row in status] == ["demo-0"] and status[0]["state"] == "ready"
    models = client(stack).models.list()
    assert [(m.id, (m.model_extra or {})["state"]) for m in models.data] == [("demo", "ready"), ("tiny", "ready")]


def test_draining_answers_503_with_retry_after(stack: Stack, rec: Any) -> None:
    served_by(stack.app).draining = True
    try:
        r = httpx.post(
            stack.url + "/v1/chat/completions", json={"model": "demo", "messages": [{"role": "user", "content": "Hi"}]}
        )
        assert r.status_code == 503 and r.headers["retry-after"] == "5"
        assert r.json()["error"]["code"] == "draining"
        assert httpx.get(stack.url + "/health").status_code == 503
        assert rec.requests == []
    finally:
        served_by(stack.app).draining = False


def test_models_retrieve_by_name_and_alias_and_head_health(stack: Stack) -> None:
    c = client(stack)
    assert c.models.retrieve("demo").id == "demo"
    assert c.models.retrieve("tiny").id == "tiny"  # an alias
    with pytest.raises(openai.NotFoundError) as info:
        c.models.retrieve("nope")
    assert info.value.body["code"] == "model_not_found"  # type: ignore[index]
    assert httpx.head(stack.url + "/health").status_code == 200
