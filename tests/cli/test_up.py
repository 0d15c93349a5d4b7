"""``orchestrator up`` end to end on the tiny model, its refusals before loading (case S02 of
tests/data/supervisor_events.md), and the ``status`` / ``logs`` / ``down`` commands that talk to it."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest
from supervision_helpers import (
    RunningUp,
    gone,
    never_a_pid,
    write_models_yaml,
)

from orchestrator.cli import control
from orchestrator.cli import models as models_cli
from orchestrator.cli.up import run_up
from orchestrator.errors import UserError
from orchestrator.host import statefile


@pytest.fixture()
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private state dir (run.json, logs) for this test."""
    monkeypatch.setenv("ORCHESTRATOR_STATE", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture()
def busy_port() -> int:
    """A port some other socket (this test) listens on."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock.getsockname()[1]
    sock.close()


def _no_children() -> bool:
    return not psutil.Process().children(recursive=True)


@pytest.mark.native
def test_dry_run_prints_the_plan_and_starts_nothing(tmp_path: Path, state: Path, bin_info, demo_model, capsys) -> None:
    config = write_models_yaml(tmp_path / "models.yaml", demo_model)
    assert run_up(config, dry_run=True, force=False) == 0
    out = capsys.readouterr().out
    assert "demo-0" in out and "draft-mtp" in out
    assert _no_children()
    assert not (state / "run.json").exists()


@pytest.mark.native
def test_s02_instance_port_taken_is_refused_before_loading(
    tmp_path: Path, state: Path, bin_info, demo_model, busy_port: int
) -> None:
    config = write_models_yaml(tmp_path / "models.yaml", demo_model, model_port=busy_port)
    with pytest.raises(UserError) as err:
        run_up(config, dry_run=False, force=False)
    message = str(err.value)
    assert f"port {busy_port}" in message and f"pid {os.getpid()}" in message  # names the holder
    assert "models[0].port" in message
    assert _no_children()
    assert not (state / "run.json").exists()


@pytest.mark.native
def test_s02_proxy_port_taken_is_refused_before_loading(
    tmp_path: Path, state: Path, bin_info, demo_model, busy_port: int
) -> None:
    config = write_models_yaml(tmp_path / "models.yaml", demo_model, port=busy_port)
    with pytest.raises(UserError) as err:
        run_up(config, dry_run=False, force=False)
    assert f"port {busy_port}" in str(err.value) and "server.port" in str(err.value)
    assert _no_children()


@pytest.mark.native
def test_second_orchestrator_is_refused_and_a_stale_record_cleared(
    tmp_path: Path, state: Path, bin_info, demo_model
) -> None:
    config = write_models_yaml(tmp_path / "models.yaml", demo_model)
    me = os.getpid()
    statefile.write({"pid": me, "pid_started": statefile.process_start_time(me), "endpoint": "http://127.0.0.1:1"})
    assert (state / "run.json").stat().st_mode & 0o777 == 0o600
    with pytest.raises(UserError, match="already running"):
        run_up(config, dry_run=False, force=False)
    assert _no_children()
    # a record whose process is gone is stale: cleared, not refused
    statefile.write({"pid": never_a_pid(), "pid_started": 0.0, "endpoint": "http://127.0.0.1:1"})
    statefile.claim()
    assert statefile.read() is None


def test_control_commands_without_an_orchestrator(state: Path, capsys) -> None:
    assert control.status(json_out=False) == 1
    assert "no orchestrator is running" in capsys.readouterr().err
    assert control.down(timeout=1) == 1
    capsys.readouterr()
    assert models_cli.load("demo") == 1
    out = capsys.readouterr()
    assert "no orchestrator is running" in out.err and "loading" not in out.out
    with pytest.raises(UserError, match="no log for instance 'nope'"):
        control.logs("nope")
    # the logs of the last run stay readable, by instance or by a model's name when it had one replica
    (state / "logs").mkdir(parents=True)
    (state / "logs" / "demo-0.log").write_text("served by demo-0\n")
    capsys.readouterr()
    assert control.logs("demo") == 0 and capsys.readouterr().out == "served by demo-0\n"
    (state / "logs" / "demo-1.log").write_text("served by demo-1\n")
    with pytest.raises(UserError, match="known instances: demo-0, demo-1"):
        control.logs("demo")  # two replicas: which one is for the user to say


@pytest.mark.native
@pytest.mark.slow
def test_up_serves_chat_status_logs_drain_and_down(tmp_path: Path, bin_info, demo_model) -> None:
    """up -> ready -> chat through the proxy -> status/logs -> SIGTERM drains an in-flight stream
    while new requests get 503 -> everything stops, run.json removed, no llama-server left."""
    # a grace the in-flight stream cannot outlast even on a loaded machine (it ends the drain early)
    # two threads: not the suite's default (LLAMA_ARG_THREADS=1, conftest.py), so the read-back below
    # shows the flag reached llama-server
    config = write_models_yaml(tmp_path / "models.yaml", demo_model, shutdown_grace=600, threads=2)
    with RunningUp(config, tmp_path / "state") as up:
        endpoint = str(up.run["endpoint"])
        assert (up.state / "run.json").stat().st_mode & 0o777 == 0o600
        banner = up.out.read_text()
        assert f"{endpoint}/v1" in banner and "curl -N" in banner and "from openai import OpenAI" in banner
        assert "demo-0: " in banner and "demo-0: stopped" not in banner  # states, but no "stopped" before the launch

        body = {"model": "demo", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "temperature": 0}
        resp = httpx.post(f"{endpoint}/v1/chat/completions", json=body, timeout=120, trust_env=False)
        assert resp.status_code == 200, resp.text
        assert resp.json()["usage"]["completion_tokens"] > 0

        result = up.cli("status", "--json")
        assert result.returncode == 0, result.stderr
        rows = json.loads(result.stdout)["instances"]
        assert rows[0]["name"] == "demo-0" and rows[0]["state"] == "ready" and rows[0]["requests"] >= 1
        status = up.cli("status").stdout
        assert status.count("│ demo-0 ") == 1  # one row per instance
        # each flag key: what models.yaml asked, or llama-server's default, beside what llama-server reports
        settings = {s["key"]: s for s in rows[0]["settings"]}
        assert settings["ctx_size"]["asked"] == settings["ctx_size"]["effective"] == "512"
        assert settings["threads"]["asked"] == settings["threads"]["effective"] == "2"
        bs = settings["speculative.backend_sampling"]
        assert bs["asked"] is None and bs["default"] == "enabled" == bs["effective"]  # left out: upstream's default
        assert "settings of demo-0" in status and "ctx_size: 512 -> 512" in status
        assert "speculative.backend_sampling: (left out: llama-server's default enabled) -> enabled" in status
        logs = up.cli("logs", "demo-0", "-n", "400")
        assert logs.returncode == 0 and "listening on" in logs.stdout
        unknown = up.cli("logs", "nope")
        assert unknown.returncode == 2 and "demo-0" in unknown.stderr
        by_model = up.cli("logs", "demo", "-n", "400")  # a model with one replica: its log
        assert by_model.returncode == 0 and "listening on" in by_model.stdout

        # drain: a long stream in flight, then SIGTERM
        children = [psutil.Process(p) for p in up.instance_pids()]
        chunks: list[str] = []
        errors: list[BaseException] = []
        first = threading.Event()

        def stream() -> None:
            long = dict(body, max_tokens=400, stream=True)  # long enough to outlast the checks below
            try:
                with httpx.stream(
                    "POST", f"{endpoint}/v1/chat/completions", json=long, timeout=300, trust_env=False
                ) as r:
                    for line in r.iter_lines():
                        if line:
                            chunks.append(line)
                            first.set()
            except httpx.HTTPError as err:  # reported by the assertion below, not as a thread error
                errors.append(err)

        reader = threading.Thread(target=stream)
        reader.start()
        assert first.wait(60)
        assert up.proc is not None
        up.proc.send_signal(signal.SIGTERM)
        _wait_draining(endpoint)
        late = httpx.post(f"{endpoint}/v1/chat/completions", json=body, timeout=30, trust_env=False)
        assert late.status_code == 503 and "Retry-After" in late.headers
        reader.join(600)
        assert not reader.is_alive() and not errors, errors
        assert chunks[-1] == "data: [DONE]"  # the in-flight stream finished
        assert up.proc.wait(timeout=60) == 0
        assert not (up.state / "run.json").exists()
        assert all(gone(c) for c in children)


def _wait_draining(endpoint: str, timeout: float = 30.0) -> None:
    """Wait until ``up`` has handled the signal: its /health says "draining" (503)."""
    deadline = time.monotonic() + timeout
    while True:
        resp = httpx.get(f"{endpoint}/health", timeout=10, trust_env=False)
        if resp.status_code == 503 and resp.json().get("status") == "draining":
            return
        assert time.monotonic() < deadline, f"not draining {timeout:g} s after SIGTERM: {resp.text}"
        time.sleep(0.05)


@pytest.mark.native
@pytest.mark.slow
def test_down_stops_a_running_orchestrator(tmp_path: Path, bin_info, demo_model) -> None:
    config = write_models_yaml(tmp_path / "models.yaml", demo_model)
    with RunningUp(config, tmp_path / "state") as up:
        children = [psutil.Process(p) for p in up.instance_pids()]
        result = up.cli("down", "--timeout", "60")
        assert result.returncode == 0 and "stopped" in result.stdout
        assert up.proc is not None and up.proc.wait(timeout=10) == 0
        assert all(gone(c) for c in children)
        assert "orchestrator stopped" in up.out.read_text()


def test_s05_status_shows_failed_state_exit_code_and_log_tail(state: Path, monkeypatch, capsys) -> None:
    """A crash-looping instance's /status row renders with its state, exit code and log tail."""
    import asyncio

    from supervision_helpers import fake_spec, fast_policy, make_config, wait_state

    from orchestrator.supervise.supervisor import ProcessState, Supervisor

    async def crash_loop() -> list[dict[str, object]]:
        sup = Supervisor(
            [fake_spec("--exit-code", "3")],
            make_config(),
            log_dir=state / "logs",
            policy=fast_policy(crash_loop_count=2, backoff_base=0.1),
        )
        await sup.start()
        try:
            await wait_state(sup.instances[0], {ProcessState.FAILED}, timeout=30)
        finally:
            await sup.stop(3)
        return sup.snapshot()

    rows = asyncio.run(crash_loop())
    me = os.getpid()
    statefile.write({"pid": me, "pid_started": statefile.process_start_time(me), "endpoint": "http://127.0.0.1:1"})
    monkeypatch.setattr(control, "fetch_status_doc", lambda run: {"instances": rows})
    assert control.status(json_out=False) == 0
    out = capsys.readouterr().out
    assert "failed" in out and "exit code 3" in out
    assert "| llama_model_load: error loading model: fake failure" in out
    assert control.status(json_out=True) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["instances"][0]["state"] == "failed" and doc["instances"][0]["exit_code"] == 3


def test_control_refuses_negative_lines_and_timeout(state: Path) -> None:
    # `logs -n -3` used to print nothing with status 0; `down --timeout -1` skipped the grace
    with pytest.raises(UserError, match="--lines must be >= 0, got -3"):
        control.logs("demo-0", lines=-3)
    with pytest.raises(UserError, match="--timeout must be >= 0 seconds, got -1"):
        control.down(timeout=-1)


def test_down_when_the_orchestrator_exits_before_the_signal(
    state: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    # the run record was live when read, and the process was gone by os.kill: no traceback
    # (a pid that cannot exist: signalling a reaped child's pid could reach whoever reused it)
    monkeypatch.setattr(statefile, "read_live", lambda: {"pid": never_a_pid(), "endpoint": "http://127.0.0.1:1"})
    assert control.down(timeout=1) == 0
    assert "stopped" in capsys.readouterr().out


def test_status_prints_prompt_cache_hits_per_session() -> None:
    """``orchestrator status`` prints each model's latest sessions from ``/status``'s ``kv.sessions``."""
    import io

    from rich.console import Console

    last = {"cached_tokens": 740, "processed_tokens": 25}
    session = {"session": "k:s1", "requests": 3, "hit_rate": 0.62, "cached_tokens": 1500, "processed_tokens": 900}
    doc = {"models": [{"model": "demo", "kv": {"sessions": [{**session, "last": last}]}}, {"model": "idle"}]}
    out = io.StringIO()
    control._print_sessions(Console(file=out, width=200), doc)
    text = out.getvalue()
    assert "prompt cache of demo per session" in text and "idle" not in text
    assert "k:s1: 3 requests, 62% of prompt tokens cached (1500 cached, 900 processed)" in text
    assert "last request 740 cached, 25 processed" in text
