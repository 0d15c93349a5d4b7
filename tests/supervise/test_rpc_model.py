"""A model launched with ``--rpc`` to a loopback worker (the real ``ggml-rpc-server``, run by
``RpcWorker``) answers through our endpoint; losing the worker marks it degraded (503 with the
reason at once), and it serves again once the worker is back on its port."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from proxy_harness import Stack, real_stack

from orchestrator.native.build import RPC_SERVER, loader_path
from orchestrator.supervise.states import ProcessState, SupervisorPolicy
from orchestrator.supervise.worker import RpcWorker, WorkerOptions

pytestmark = [pytest.mark.native, pytest.mark.slow]


class WorkerThread:
    """An ``RpcWorker`` on its own event loop in a thread (like ``orchestrator worker`` elsewhere)."""

    def __init__(self, bin_info: Any, log: Path, port: int = 0) -> None:
        binary = bin_info.bin_dir / RPC_SERVER
        if not binary.is_file():
            pytest.skip(f"the build has no {RPC_SERVER}; run `orchestrator build`")
        options = WorkerOptions(
            binary=binary,
            port=port,
            threads=1,
            protocol=bin_info.manifest.get("rpc_protocol"),
            env=loader_path([str(bin_info.bin_dir)]),
        )
        self.loop = asyncio.new_event_loop()
        self.worker = RpcWorker(options, log, policy=SupervisorPolicy(poll_interval=0.05, stop_grace=5.0))
        self.done: asyncio.Future[int] | None = None
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.done = asyncio.run_coroutine_threadsafe(self.worker.run(), self.loop)  # type: ignore[assignment]
        deadline = time.monotonic() + 60
        while self.worker.state is not ProcessState.READY:
            assert time.monotonic() < deadline, f"worker not ready: {self.worker.message}"
            time.sleep(0.05)
        assert self.worker.endpoint is not None
        self.endpoint: str = self.worker.endpoint

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.worker.stop)
        assert self.done is not None
        assert self.done.result(60) == 0  # type: ignore[call-arg]
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def worker(bin_info: Any, tmp_path: Path) -> Iterator[WorkerThread]:
    w = WorkerThread(bin_info, tmp_path / "worker-a.log")
    yield w
    if w.thread.is_alive():
        w.stop()


def _chat(stack: Stack) -> str:
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    out = client.chat.completions.create(
        model="split", messages=[{"role": "user", "content": "hello"}], max_tokens=8, temperature=0
    )
    assert out.usage is not None and out.usage.completion_tokens > 0
    return out.choices[0].message.content or ""


def _wait(predicate: Any, what: str, timeout: float = 60.0, inst: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            where = ""
            if inst is not None:  # what the instance was doing, for a failure that does not repeat
                where = f": {inst.state} {inst.message!r} degraded={inst.workers.degraded!r}; log: "
                where += " | ".join(inst.log.run_tail(8))
            raise AssertionError(f"timed out waiting for {what}{where}")
        time.sleep(0.05)


def test_model_over_an_rpc_worker_degrades_and_recovers(
    worker: WorkerThread, bin_info: Any, echo_model: Path, tmp_path: Path
) -> None:
    model = {"name": "split", "ctx_size": 512, "threads": 1, "gpu_layers": "all", "rpc": [worker.endpoint]}
    stack = real_stack(tmp_path, echo_model, bin_info, models=[model])
    try:
        inst = stack.supervisor.instances[0]
        assert "--rpc" in inst.spec.argv and worker.endpoint in inst.spec.argv
        first = _chat(stack)
        assert "Accepted client connection" in (tmp_path / "worker-a.log").read_text()  # layers live there
        assert inst.workers is not None and inst.workers.infos[worker.endpoint].devices

        worker.stop()  # the worker machine goes away
        # durable until the worker returns: lost, then waiting for it (RESTARTING, degraded, both times)
        _wait(
            lambda: inst.state is ProcessState.RESTARTING and inst.workers.degraded is not None,
            "degraded",
            timeout=120,
            inst=inst,
        )
        assert "RPC worker" in (inst.message or "")
        started = time.monotonic()
        resp = httpx.post(
            stack.url + "/v1/chat/completions",
            json={"model": "split", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            timeout=60,
        )
        assert time.monotonic() - started < 10  # at once, not after server.timeouts.queue
        assert resp.status_code == 503 and resp.headers["retry-after"]
        error = resp.json()["error"]
        assert error["code"] == "model_degraded" and worker.endpoint in error["message"]
        row = httpx.get(stack.url + "/status").json()["instances"][0]
        assert row["state"] == "restarting" and worker.endpoint in row["rpc"]["degraded"]
        assert row["rpc"]["workers"][0]["devices"][0]["total"] > 0  # memory it reported before the loss

        back = WorkerThread(bin_info, tmp_path / "worker-b.log", port=int(worker.endpoint.rsplit(":", 1)[1]))
        try:
            _wait(
                lambda: inst.state is ProcessState.READY, "recovery after the worker came back", timeout=120, inst=inst
            )
            assert inst.workers.degraded is None
            assert _chat(stack) == first  # greedy: the same answer as before the loss
        finally:
            back.stop()
    finally:
        stack.close()


def test_a_worker_of_another_protocol_is_refused(bin_info: Any, echo_model: Path, tmp_path: Path) -> None:
    async def old_hello(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(9 + 24)
        answer = bytes([6, 0, 0, 0]) + bytes(24)
        writer.write(len(answer).to_bytes(8, "little") + answer)
        await writer.drain()
        await reader.read()

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = asyncio.run_coroutine_threadsafe(asyncio.start_server(old_hello, "127.0.0.1", 0), loop).result(10)
    endpoint = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        model = {"name": "split", "ctx_size": 512, "threads": 1, "rpc": [endpoint]}
        stack = real_stack(tmp_path, echo_model, bin_info, models=[model], wait=False)
        try:
            stack.run(stack.supervisor.start())
            inst = stack.supervisor.instances[0]
            _wait(lambda: inst.state is ProcessState.FAILED, "the refusal")
            assert "RPC protocol 6.0.0" in (inst.message or "") and "orchestrator worker" in (inst.message or "")
            assert inst.pid is None  # llama-server was never started against it
        finally:
            stack.close()
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
