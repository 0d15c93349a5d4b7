"""RPC workers: the protocol probe (against scripted sockets for the refusals), and the real
``ggml-rpc-server`` of our build run by ``RpcWorker`` and by ``orchestrator worker``."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator.host.process import die_with_parent
from orchestrator.native import rpc
from orchestrator.native.build import RPC_SERVER, loader_path
from orchestrator.supervise.states import ProcessState, SupervisorPolicy
from orchestrator.supervise.worker import RpcWorker, WorkerOptions

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _serve(handler: Handler) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def _old_worker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers like a ggml-rpc-server of protocol 6.1.0 with one 8 GiB device, 6 GiB free."""
    while True:
        try:
            cmd, size = struct.unpack("<BQ", await reader.readexactly(9))
            await reader.readexactly(size)
        except asyncio.IncompleteReadError:
            return
        answer = {
            rpc.CMD_HELLO: bytes([6, 1, 0, 0]) + bytes(rpc.CONN_CAPS_SIZE),
            rpc.CMD_DEVICE_COUNT: struct.pack("<I", 1),
            rpc.CMD_GET_DEVICE_MEMORY: struct.pack("<QQ", 6 * 2**30, 8 * 2**30),
        }[cmd]
        writer.write(struct.pack("<Q", len(answer)) + answer)
        await writer.drain()


def test_probe_reads_devices_and_refuses_another_protocol() -> None:
    async def go() -> tuple[rpc.RpcWorkerInfo, str | None]:
        server, endpoint = await _serve(_old_worker)
        async with server:
            info = await rpc.probe(endpoint, 10)
        return info, rpc.protocol_problem(info, "7.0.0")

    info, problem = asyncio.run(go())
    assert info.protocol == "6.1.0"
    assert [(d.free, d.total) for d in info.devices] == [(6 * 2**30, 8 * 2**30)]
    assert problem is not None and "6.1.0" in problem and "7.0.0" in problem and "orchestrator worker" in problem
    assert rpc.protocol_problem(info, "6.1.0") is None


def test_probe_tells_busy_from_unreachable() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # accepts, never answers: a worker busy with another client

    async def go() -> tuple[BaseException, BaseException]:
        server, endpoint = await _serve(silent)
        async with server:
            with pytest.raises(rpc.RpcBusy) as busy:
                await rpc.probe(endpoint, 0.5)
        # bound but not listening: connections to it are refused, and nobody else can take the port
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            with pytest.raises(rpc.RpcUnreachable) as refused:
                await rpc.probe(f"127.0.0.1:{closed.getsockname()[1]}", 5)
        return busy.value, refused.value

    busy, refused = asyncio.run(go())
    assert "serves another client" in str(busy)
    assert "not reachable" in str(refused)


def test_split_endpoint_names_the_form() -> None:
    assert rpc.split_endpoint("10.0.0.2:50052") == ("10.0.0.2", 50052)
    for bad in ("10.0.0.2", "host:0", ":50052", "host:x"):
        with pytest.raises(ValueError, match="host:port"):
            rpc.split_endpoint(bad)


# --- the real ggml-rpc-server -------------------------------------------------------------------


def _options(bin_info: Any, port: int = 0) -> WorkerOptions:
    binary = bin_info.bin_dir / RPC_SERVER
    if not binary.is_file():
        pytest.skip(f"the build has no {RPC_SERVER}; run `orchestrator build`")
    return WorkerOptions(
        binary=binary,
        port=port,
        threads=1,
        protocol=bin_info.manifest.get("rpc_protocol"),
        env=loader_path([str(bin_info.bin_dir)]),
    )


def _policy() -> SupervisorPolicy:
    return SupervisorPolicy(poll_interval=0.05, backoff_base=0.2, stop_grace=5.0, exit_drain=0.2)


async def _until(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


@pytest.mark.native
def test_worker_reports_devices_restarts_after_a_crash_and_leaves_nothing(bin_info: Any, tmp_path: Path) -> None:
    async def go() -> None:
        worker = RpcWorker(_options(bin_info), tmp_path / "worker.log", policy=_policy())
        task = asyncio.create_task(worker.run())
        await _until(lambda: worker.state is ProcessState.READY, "the worker to answer")
        assert worker.info is not None and worker.info.protocol == bin_info.manifest["rpc_protocol"]
        assert worker.info.devices and all(d.total > 0 for d in worker.info.devices)
        endpoint, first = worker.endpoint, worker.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)  # a crash: restarted on the same port
        await _until(lambda: worker.pid != first and worker.state is ProcessState.READY, "the restart")
        assert worker.endpoint == endpoint and worker.lifecycle.restarts == 1
        second = worker.pid
        worker.stop()
        assert await asyncio.wait_for(task, 30) == 0
        assert worker.state is ProcessState.STOPPED
        assert second is not None and not psutil.pid_exists(second)
        assert "Starting RPC server" in (tmp_path / "worker.log").read_text()

    asyncio.run(go())


@pytest.mark.native
def test_worker_command_warns_off_loopback_and_stops_its_child(bin_info: Any, tmp_path: Path) -> None:
    _options(bin_info)  # skips without the binary
    env = {**os.environ, "ORCHESTRATOR_STATE": str(tmp_path / "state")}
    argv = [sys.executable, "-m", "orchestrator.cli.app", "worker", "--host", "0.0.0.0", "--port", "0"]
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=die_with_parent()
    )
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "worker ready" in line:
                break
        out = "".join(lines)
        assert "no authentication" in out and "trust" in out, out
        assert "worker ready: 127.0.0.1:" in out and "GiB free" in next(proc.stdout), out
        children = psutil.Process(proc.pid).children()
        assert [c.name() for c in children] == [RPC_SERVER]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert not children[0].is_running()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_fit_check_counts_the_workers_free_memory() -> None:
    from orchestrator.errors import UserError
    from orchestrator.host.gpus import GPU
    from orchestrator.launch.fit import GIB, FitRequest, check_fit

    gpu = GPU(0, "NVIDIA GeForce RTX 5090", "GPU-0000", 32 * GIB, 30 * GIB, "12.0")
    big = FitRequest("big-0", "models.yaml:3: models[0]", (0,), 50 * GIB, overhead=2 * GIB)
    with pytest.raises(UserError, match="big-0"):
        check_fit([big], [gpu])  # 52 GiB on a 30 GiB card
    check_fit([dataclasses.replace(big, remote_free=24 * GIB)], [gpu])  # 26 + 2 GiB stay local: fits
    with pytest.raises(UserError):
        check_fit([dataclasses.replace(big, remote_free=10 * GIB)], [gpu])  # 40 + 2 GiB still do not
