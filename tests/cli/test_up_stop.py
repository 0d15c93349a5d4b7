"""Stopping ``orchestrator up`` never hangs on a prompt-cache save: a second signal skips the saves,
and a child that does not answer its slot list is given up on after ``LIST_TIMEOUT``."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from supervision_helpers import RunningUp, write_models_yaml

from orchestrator.supervise import slot_client
from orchestrator.supervise.slot_client import SlotClient, SlotError


def _wait_for(path: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in path.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"no {text!r} in:\n{path.read_text(errors='replace')[-3000:]}"
        time.sleep(0.1)


@pytest.mark.native
@pytest.mark.slow
def test_a_second_signal_skips_a_save_that_waits_on_a_frozen_child(
    tmp_path: Path, bin_info: Any, demo_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kv_persist model whose llama-server froze (SIGSTOP) after a request: the first SIGTERM's
    save waits on the child's slot list; a second SIGTERM skips it, says so, and `up` stops the
    frozen child (SIGKILL after the stop grace) well before the listing's own timeout would end."""
    monkeypatch.setenv("ORCHESTRATOR_KV", str(tmp_path / "kv"))
    config = write_models_yaml(tmp_path / "models.yaml", demo_model, shutdown_grace=5, extra="    kv_persist: true\n")
    with RunningUp(config, tmp_path / "state") as up:
        body = {"model": "demo", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
        answer = httpx.post(f"{up.run['endpoint']}/v1/chat/completions", json=body, timeout=120, trust_env=False)
        assert answer.status_code == 200, answer.text  # a slot now holds a prompt worth saving
        [pid] = up.instance_pids()
        child = psutil.Process(pid)
        os.kill(pid, signal.SIGSTOP)
        assert up.proc is not None
        up.proc.send_signal(signal.SIGTERM)
        _wait_for(up.out, "saving prompt caches: signal again to skip", 60)
        time.sleep(1)  # the save is now waiting on the frozen child's GET /slots
        asked = time.monotonic()
        up.proc.send_signal(signal.SIGTERM)
        assert up.proc.wait(timeout=60) == 0
        took = time.monotonic() - asked
        # the stop grace (10 s) for the frozen child, not the slot list's 30 s plus that grace
        assert took < slot_client.LIST_TIMEOUT - 5, took
        assert "kv: saving demo's slots before shutdown skipped" in up.out.read_text()
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
        assert not (up.state / "run.json").exists()


@pytest.mark.native
@pytest.mark.slow
def test_a_second_signal_during_the_drain_skips_it_but_still_saves(
    tmp_path: Path, bin_info: Any, demo_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second Ctrl-C while an in-flight stream drains (before any save began) skips the drain
    and the wait for that stream, not the saves: the idle slot is saved. The long stream keeps the
    drain waiting, so the second signal cannot race the saves."""
    kv = tmp_path / "kv"
    monkeypatch.setenv("ORCHESTRATOR_KV", str(kv))
    config = tmp_path / "models.yaml"  # 16,000 tokens a slot: the stream outlasts the test
    config.write_text(
        "server: {host: 127.0.0.1, port: 0, timeouts: {load: 120, shutdown_grace: 300}}\n"
        f"models:\n  - {{name: demo, path: {demo_model}, ctx_size: 32768, parallel: 2, threads: 1, kv_persist: true, "
        "allow_ctx_beyond_trained: true}\n"
    )
    with RunningUp(config, tmp_path / "state") as up:
        url = f"{up.run['endpoint']}/v1/chat/completions"
        first, errors = threading.Event(), []

        def stream() -> None:  # one slot busy through the drain
            long = {"model": "demo", "messages": [{"role": "user", "content": "go on"}], "max_tokens": 16000}
            try:
                with httpx.stream("POST", url, json={**long, "stream": True}, timeout=300, trust_env=False) as r:
                    for _ in r.iter_lines():
                        first.set()
            except httpx.HTTPError as err:  # the stop cuts it: expected
                errors.append(err)

        reader = threading.Thread(target=stream)
        reader.start()
        assert first.wait(60)
        body = {"model": "demo", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
        answer = httpx.post(url, json=body, timeout=120, trust_env=False)  # the other slot, then idle
        assert answer.status_code == 200, answer.text
        assert up.proc is not None
        up.proc.send_signal(signal.SIGINT)
        _wait_for(up.out, "draining: waiting up to 300 s", 60)  # the stream is in flight
        assert "saving prompt caches" not in up.out.read_text()
        asked = time.monotonic()
        up.proc.send_signal(signal.SIGINT)
        assert up.proc.wait(timeout=120) == 0
        # neither the stream's end (16,000 tokens) nor the 300 s grace: the drain and uvicorn's wait skipped
        assert time.monotonic() - asked < 15
        reader.join(60)
    out = up.out.read_text()
    assert "skipped" not in out and "Traceback" not in out, out[-2000:]
    assert [p for p in (kv / "demo").glob("*.bin") if p.stat().st_size > 0], sorted(kv.rglob("*"))


def test_a_slot_list_that_never_comes_is_a_slot_error_after_the_list_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """``GET /slots`` of a child that accepts and never answers: a ``SlotError`` after
    ``LIST_TIMEOUT`` (not the 600 s a save or restore may take)."""
    monkeypatch.setattr(slot_client, "LIST_TIMEOUT", 0.5)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(SlotError, match="/slots: ReadTimeout"):
            asyncio.run(SlotClient().slots(url))
        assert time.monotonic() - started < 10
