"""A full or read-only disk degrades, never stops serving (``orchestrator.host.disk``).

Real file systems, no mocks: a tmpfs mounted under the test's folder is filled to the last
block while ``orchestrator up`` serves, or mounted read-only before it starts (the tests mount,
so they need root; each unmounts in its teardown, always). Throughout, chat requests succeed;
``/health``, ``/status``, the console's poll and ``orchestrator status`` name the file that
cannot be written; the child's log lives on in memory; ``doctor`` reports the folder.
"""

from __future__ import annotations

import contextlib
import errno
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from supervision_helpers import RunningUp, child_env, die_with_parent, write_models_yaml

from orchestrator.cli import doctor
from orchestrator.host import disk
from orchestrator.supervise.child_io import ChildLog

CHAT = {"model": "demo", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, "temperature": 0}


@contextlib.contextmanager
def tmpfs(where: Path, *options: str) -> Iterator[Path]:
    """A small tmpfs mounted at ``where`` (``options`` e.g. ``ro``), unmounted on exit whatever happens."""
    where.mkdir(parents=True, exist_ok=True)
    opts = ",".join(("size=8m", *options))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(folder: Path) -> Path:
    """Write zeros into ``folder`` until its file system is full; returns the filler file."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError as err:
            assert err.errno == errno.ENOSPC, err
    return filler


def wait_for(what: str, cond: object, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.2)


def faults_of(endpoint: str) -> list[str]:
    return [f["what"] for f in httpx.get(f"{endpoint}/health", timeout=30, trust_env=False).json()["disk"]]


def chat_ok(endpoint: str) -> None:
    resp = httpx.post(f"{endpoint}/v1/chat/completions", json=CHAT, timeout=120, trust_env=False)
    assert resp.status_code == 200, resp.text


@pytest.mark.native
@pytest.mark.slow
def test_a_state_folder_that_fills_up_while_serving(tmp_path: Path, bin_info, demo_model) -> None:
    config = write_models_yaml(tmp_path / "models.yaml", demo_model)
    # RunningUp writes up's output into the state folder: on the full disk too
    with tmpfs(tmp_path / "state") as state, RunningUp(config, state) as up:
        endpoint = str(up.run["endpoint"])
        chat_ok(endpoint)
        filler = fill(state)
        for _ in range(3):  # llama-server logs every request: those lines hit the full disk
            chat_ok(endpoint)
        # run.json is published at least every 2 s
        wait_for("both faults shown", lambda: {"state file run.json", "log demo-0.log"} <= set(faults_of(endpoint)))
        assert up.proc is not None and up.proc.poll() is None
        restarted = httpx.post(f"{endpoint}/models/restart", json={"model": "demo"}, timeout=120, trust_env=False)
        assert restarted.status_code == 202, restarted.text  # a relaunch: its launch marker hits the full disk
        wait_for("relaunched", lambda: httpx.get(f"{endpoint}/health", timeout=30, trust_env=False).status_code == 200)
        chat_ok(endpoint)
        status = httpx.get(f"{endpoint}/status", timeout=30, trust_env=False).json()
        assert {f["what"] for f in status["disk"]} >= {"state file run.json", "log demo-0.log"}
        assert any("No space left" in f["error"] for f in status["disk"])
        live = httpx.get(f"{endpoint}/ui/api/live", timeout=30, trust_env=False).json()
        assert live["disk"]
        tail = httpx.get(f"{endpoint}/ui/api/logs/demo-0", timeout=30, trust_env=False).json()
        assert tail["memory"] is True and tail["lines"], tail  # the log's in-memory tail
        shown = up.cli("status")
        assert shown.returncode == 0 and "disk: cannot write state file run.json" in shown.stdout, shown.stdout
        filler.unlink()
        wait_for("run.json writable again", lambda: "state file run.json" not in faults_of(endpoint))
        chat_ok(endpoint)
        assert up.proc.poll() is None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.native
@pytest.mark.slow
def test_a_read_only_state_folder_at_start(tmp_path: Path, bin_info, demo_model) -> None:
    port = free_port()
    config = write_models_yaml(tmp_path / "models.yaml", demo_model, port=port)
    endpoint = f"http://127.0.0.1:{port}"
    with tmpfs(tmp_path / "state", "ro") as state, open(tmp_path / "up.out", "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli.app", "up", "--config", str(config)],
            env=child_env(ORCHESTRATOR_STATE=str(state)),
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent(),
        )
        try:

            def serving() -> bool:
                assert proc.poll() is None, (tmp_path / "up.out").read_text()
                try:
                    return httpx.get(f"{endpoint}/health", timeout=5, trust_env=False).status_code == 200
                except httpx.HTTPError:
                    return False

            wait_for("up serves", serving, timeout=180)
            chat_ok(endpoint)
            assert {"state file run.json", "log demo-0.log"} <= set(faults_of(endpoint))
            assert not (state / "run.json").exists()
            log = (tmp_path / "up.out").read_text()
            assert log.count("cannot write state file run.json") == 1, log  # warned once
        finally:
            children = psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
            for child in children:
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()


def test_child_log_falls_back_to_its_memory_tail_and_recovers(tmp_path: Path) -> None:
    disk.clear()
    with tmpfs(tmp_path / "logs") as folder:
        lines: list[str] = []
        log = ChildLog(folder / "x-0.log", 5, lines.append)
        log.begin_launch("--- launch 1")
        filler = fill(folder)
        for i in range(2000):  # more than the file system's last block can take
            log._line(f"line {i} " + "x" * 100)
        assert disk.failing("log x-0.log")
        assert log.tail(5) == [f"line {i} " + "x" * 100 for i in range(1995, 2000)] and len(lines) == 2000
        filler.unlink()
        log.begin_launch("--- launch 2")  # a launch retries the file at once
        assert not disk.failing("log x-0.log")
        log.close()
        assert (folder / "x-0.log").read_text().endswith("--- launch 2\n")


def test_attempt_records_disk_faults_and_raises_the_rest(tmp_path: Path) -> None:
    disk.clear()
    with tmpfs(tmp_path / "ro", "ro") as folder:
        assert disk.attempt("thing", folder / "f", lambda: (folder / "f").write_text("x")) is None
        assert disk.attempt("thing", folder / "f", lambda: (folder / "f").write_text("x")) is None
        (fault,) = disk.faults()
        assert fault["what"] == "thing" and fault["count"] == 2 and "Read-only" in str(fault["error"])
        with pytest.raises(FileNotFoundError):  # not the disk's fault: a bug, raised
            disk.attempt("other", tmp_path / "no" / "f", lambda: (tmp_path / "no" / "f").write_text("x"))
        assert disk.attempt("thing", tmp_path / "g", lambda: (tmp_path / "g").write_text("x")) == 1
        assert disk.faults() == []


def test_doctor_reports_a_read_only_or_full_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with tmpfs(tmp_path / "ro", "ro") as ro:
        check = doctor.check_folder("state folder", ro / "state", "ORCHESTRATOR_STATE")
        assert check.status == doctor.WARN and "not writable" in check.detail and "ORCHESTRATOR_STATE" in str(check.fix)
    with tmpfs(tmp_path / "full") as full:
        fill(full)
        check = doctor.check_folder("cache folder", full, "ORCHESTRATOR_CACHE")
        assert check.status == doctor.WARN and "nearly full" in check.detail
    assert doctor.check_folder("state folder", tmp_path, "ORCHESTRATOR_STATE").status == doctor.OK
    monkeypatch.setenv("ORCHESTRATOR_STATE", str(tmp_path / "st"))
    names = {c.name: c for c in doctor.collect(tmp_path / "models.yaml")}
    assert names["state folder"].status == doctor.OK and names["state folder"].detail == str(tmp_path / "st")


def test_a_kv_folder_that_cannot_be_made_launches_the_model_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.config.schema import ModelConfig
    from orchestrator.launch.plan import _slot_save_path

    disk.clear()
    with tmpfs(tmp_path / "kv", "ro") as folder:
        monkeypatch.setenv("ORCHESTRATOR_KV", str(folder))
        model = ModelConfig(name="demo", path="x.gguf", kv_persist=True)
        assert _slot_save_path(model) is None  # no --slot-save-path: llama-server would refuse a missing folder
        assert disk.failing("saved prompt caches of demo")
    monkeypatch.setenv("ORCHESTRATOR_KV", str(tmp_path / "kv-ok"))
    assert _slot_save_path(model) == tmp_path / "kv-ok" / "demo" and not disk.failing("saved prompt caches of demo")


def test_ups_output_on_a_full_disk_is_a_fault_not_an_exit(tmp_path: Path) -> None:
    from rich.console import Console

    from orchestrator.cli.up import UpDisplay

    disk.clear()
    with tmpfs(tmp_path / "out") as folder:
        out = open(folder / "up.out", "w", buffering=1)  # noqa: SIM115 (its close fails on the full disk)
        fill(folder)
        display = UpDisplay(Console(file=out, width=200), supervisor=None, config=None)  # type: ignore[arg-type]
        for i in range(2000):  # more than the last page of the file can take
            display.note(f"note {i} " + "x" * 100)
        assert disk.failing("up's output")
        with contextlib.suppress(OSError):
            out.close()


def test_bench_apply_on_a_read_only_models_yaml_is_a_user_error(tmp_path: Path) -> None:
    from orchestrator.config.yaml_edit import set_draft_length
    from orchestrator.errors import UserError

    with tmpfs(tmp_path / "cfg") as folder:
        config = write_models_yaml(folder / "models.yaml", Path("/nowhere/demo.gguf"))
        before = config.read_text()
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        with pytest.raises(UserError) as info:
            set_draft_length(config, "demo", 2)
        assert str(config) in str(info.value) and "Read-only" in str(info.value)
        assert config.read_text() == before
