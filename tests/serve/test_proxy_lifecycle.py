"""The proxy while instances load, die and come back, with the real Supervisor (cases S01, S04, S05
of tests/data/supervisor_events.md).

- S01: a request that arrives while the only instance loads is held and forwarded only once the
  instance serves (``when_loading: hold``), or answered 503 + Retry-After at once (``reject``),
  or 503 when the hold outlasts ``timeouts.queue``. A never-ready instance is the supervisor
  tests' fake llama-server (``--load-seconds -1``: its ``/health`` answers 503 forever).
- S04/S05: ``kill -9`` of the real llama-server mid-stream gives the client an error event and a
  closed stream; the supervisor restarts the instance and the next request succeeds.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from proxy_harness import Stack, real_stack
from supervision_helpers import fake_spec, fast_policy

from orchestrator.config.schema import Config, ModelConfig, ServerConfig, Timeouts
from orchestrator.serve.app import served_by
from orchestrator.supervise.model_state import ModelState
from orchestrator.supervise.status import status_row
from orchestrator.supervise.supervisor import ProcessState

CHAT = {"model": "demo", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}


def loading_forever_stack(tmp_path: Path, **server: object) -> Stack:
    config = Config(server=ServerConfig(**server), models=[ModelConfig(name="demo", path="/unused.gguf")])
    stack = Stack(config, [fake_spec("--load-seconds", "-1")], tmp_path / "logs", policy=fast_policy())
    stack.start_instances(wait=False)
    deadline = time.monotonic() + 10
    while stack.supervisor.instances[0].state is not ProcessState.LOADING:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return stack


def test_reject_mode_answers_503_at_once_and_never_forwards(tmp_path: Path) -> None:
    stack = loading_forever_stack(tmp_path, when_loading="reject")
    try:
        started = time.monotonic()
        r = httpx.post(stack.url + "/v1/chat/completions", json=CHAT, timeout=30)
        assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
        assert r.json()["error"]["code"] == "model_loading"
        assert time.monotonic() - started < 30  # at once: holding would wait timeouts.queue (300 s)
        assert stack.recorder.requests == []
        assert httpx.get(stack.url + "/health").status_code == 503
    finally:
        stack.close()


def test_hold_mode_gives_up_after_the_queue_timeout(tmp_path: Path) -> None:
    stack = loading_forever_stack(tmp_path, timeouts=Timeouts(queue=0.5))
    try:
        started = time.monotonic()
        r = httpx.post(stack.url + "/v1/chat/completions", json=CHAT, timeout=30)
        assert r.status_code == 503 and "retry-after" in r.headers
        assert "after waiting 0.5 s" in r.json()["error"]["message"]
        assert time.monotonic() - started >= 0.5
        assert stack.recorder.requests == []
    finally:
        stack.close()


@pytest.mark.native
def test_hold_mode_forwards_only_once_the_instance_serves(tmp_path: Path, bin_info: Any, echo_model: Path) -> None:
    """S01 with the real server: the request arrives during the load and is held, not refused."""
    stack = real_stack(tmp_path, echo_model, bin_info, wait=False)
    try:
        stack.run(stack.supervisor.start())
        inst = stack.supervisor.instances[0]
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            assert inst.state is ProcessState.LOADING
            future = pool.submit(httpx.post, stack.url + "/v1/chat/completions", json=CHAT, timeout=120)
            r = future.result()
        assert r.status_code == 200, r.text
        assert [state for _, _, state in stack.recorder.requests] == ["ready"]
    finally:
        stack.close()


@pytest.mark.native
@pytest.mark.slow
def test_kill_9_mid_stream_gives_an_error_event_then_recovers(tmp_path: Path, bin_info: Any, echo_model: Path) -> None:
    """S04/S05: the child dies mid-stream; the client gets an error and a closed stream, not a hang."""
    stack = real_stack(tmp_path, echo_model, bin_info)
    try:
        inst = stack.supervisor.instances[0]
        pid = inst.pid
        assert pid is not None
        body = {**CHAT, "max_tokens": 3900, "stream": True, "chat_template_kwargs": {"enable_thinking": False}}
        events: list[bytes] = []
        with httpx.stream("POST", stack.url + "/v1/chat/completions", json=body, timeout=30) as r:
            buf = b""
            for raw in r.iter_raw():
                buf += raw
                if len(events) == 0 and buf.count(b"\n\n") >= 3:
                    os.kill(pid, signal.SIGKILL)
                    events.append(b"killed")
            # the iteration ended: the proxy completed the response
        last = [e for e in buf.split(b"\n\n") if e]
        assert last[-1] == b"data: [DONE]"
        error = json.loads(last[-2][6:])["error"]
        assert error["type"] == "upstream_error" and error["code"] == "upstream_disconnected"

        # The supervisor restarts it (S05) and the next request succeeds.
        deadline = time.monotonic() + 30
        while inst.restarts == 0:
            assert time.monotonic() < deadline, status_row(inst)
            time.sleep(0.05)
        stack.wait_serving(60)
        assert inst.restarts == 1 and inst.pid != pid
        c = openai.OpenAI(base_url=stack.url + "/v1", api_key="x", max_retries=0, timeout=60)
        again = c.chat.completions.create(
            model="demo",
            messages=CHAT["messages"],
            max_tokens=4,
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )
        assert again.choices[0].message.content
        assert [u.base_url for u in served_by(stack.app).pool.all()] == [inst.base_url]  # the old port's client went

        # The official client sees the mid-stream death as an APIError.
        pid = inst.pid
        assert pid is not None
        stream = c.chat.completions.create(
            model="demo",
            messages=CHAT["messages"],
            max_tokens=3900,
            stream=True,
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )
        with stream, pytest.raises(openai.APIError, match="closed the connection"):  # its connection closed after
            for n, _chunk in enumerate(stream):
                if n == 2:
                    os.kill(pid, signal.SIGKILL)
    finally:
        stack.close()


def test_shutdown_during_a_load_is_not_a_failed_load(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Ctrl-C while `up` still loads: the stop is the user's, so no 'failed to load' is logged or
    shown and the model ends unloaded, not failed (the load is slow by fault: --load-seconds -1)."""
    config = Config(models=[ModelConfig(name="demo", path="/unused.gguf")])
    stack = Stack(config, [fake_spec("--load-seconds", "-1")], tmp_path / "logs", policy=fast_policy())
    try:
        stack.run(stack.scheduler.start())
        model = stack.scheduler.models["demo"]
        deadline = time.monotonic() + 30
        while not (model.state is ModelState.LOADING and stack.supervisor.instances[0].pid):
            assert time.monotonic() < deadline, (model.state, stack.supervisor.snapshot())
            time.sleep(0.05)
        with caplog.at_level(logging.WARNING):
            stack.run(stack.scheduler.close(3.0))
        assert not [r for r in caplog.records if "failed to load" in r.getMessage()]
        assert model.state is ModelState.UNLOADED and "shutting down" in (model.reason or ""), model.state
    finally:
        stack.close()
