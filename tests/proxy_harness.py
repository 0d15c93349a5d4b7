"""Test harness for the proxy: the app served by a real uvicorn on an OS-picked port.

- :class:`Stack` runs an asyncio loop in a thread; the app, the real ``Supervisor`` and its
  llama-server children all live on that loop, while tests drive it synchronously (the official
  ``openai`` client, ``httpx``) from the main thread.
- :class:`Recorder` is the recording tap: a request hook on the proxy's upstream clients
  that keeps every body the proxy sent to llama-server (bytes, as sent).
- :class:`FakeUpstream` is a scripted raw HTTP/1.1 server for fault injection only (a connection
  closed without a response, a slow first byte, a stalled stream, a canned reasoning answer).
  Each accepted connection is handled by the test's coroutine.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import socket
import threading
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import uvicorn

from orchestrator.config.schema import Config
from orchestrator.launch.spec import InstanceSpec
from orchestrator.serve.app import create_app, served_by
from orchestrator.serve.http.limits import uvicorn_config
from orchestrator.supervise.budget import budget_for
from orchestrator.supervise.model_state import SchedulerPolicy
from orchestrator.supervise.scheduler import ModelScheduler
from orchestrator.supervise.supervisor import ProcessState, Supervisor, SupervisorPolicy

T = TypeVar("T")


class Recorder:
    """Records each request the proxy sends upstream: ``(path, body bytes, instance state)``."""

    def __init__(self, supervisor: Supervisor | None = None) -> None:
        self.requests: list[tuple[str, bytes, str | None]] = []
        self._supervisor = supervisor

    async def __call__(self, base_url: str, path: str, content: bytes) -> None:
        state = None
        if self._supervisor is not None:
            for inst in self._supervisor.instances:
                if inst.base_url and inst.base_url.rstrip("/") == base_url:
                    state = inst.state.value
        self.requests.append((path, content, state))

    def bodies(self, path: str = "/v1/chat/completions") -> list[dict[str, Any]]:
        """Parsed bodies sent to ``path``."""
        return [json.loads(body) for p, body, _ in self.requests if p == path]

    def clear(self) -> None:
        self.requests.clear()


class Stack:
    """A loop thread hosting the app (uvicorn on 127.0.0.1, OS-picked port) and a Supervisor.

    Args:
        config: the config given to ``create_app``.
        specs: instance specs for the real ``Supervisor`` (not started here; see :meth:`start_instances`).
        log_dir: the supervisor's log directory.
        policy: supervisor timing rules.
    """

    def __init__(
        self,
        config: Config,
        specs: list[InstanceSpec],
        log_dir: Path,
        policy: SupervisorPolicy | None = None,
        scheduler_policy: SchedulerPolicy | None = None,
    ) -> None:
        self.config = config
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="proxy-stack", daemon=True)
        self._thread.start()
        self.supervisor: Supervisor = self.run(self._make_supervisor(specs, config, log_dir, policy))
        self.scheduler = ModelScheduler(self.supervisor, budget_for(config.server, gpu_indices=[]), scheduler_policy)
        self.app = create_app(config, self.supervisor, self.scheduler)
        self.recorder = Recorder(self.supervisor)
        served_by(self.app).pool.hooks.append(self.recorder)
        self._server: uvicorn.Server | None = None
        self._serve_task: asyncio.Task[None] | None = None
        self.fakes: list[FakeUpstream] = []
        self.url = self.run(self._serve())

    @staticmethod
    async def _make_supervisor(
        specs: list[InstanceSpec], config: Config, log_dir: Path, policy: SupervisorPolicy | None
    ) -> Supervisor:
        return Supervisor(specs, config, log_dir=log_dir, policy=policy)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 120) -> T:
        """Run ``coro`` on the stack's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _serve(self) -> str:
        # proto IPPROTO_TCP: asyncio sets TCP_NODELAY only on accepted sockets whose proto says
        # TCP; with proto 0, Nagle + delayed ACK add ~40 ms to every response.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))  # the OS picks; uvicorn serves on this very socket
        port = sock.getsockname()[1]
        limits = (self.config.server.max_header_bytes, self.config.server.timeouts.client_header)
        config = uvicorn_config(self.app, *limits, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._serve_task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._serve_task.done():
                self._serve_task.result()
            await asyncio.sleep(0.01)
        return f"http://127.0.0.1:{port}"

    def start_instances(self, wait: bool = True, timeout: float = 120) -> None:
        """Start every supervised instance; with ``wait``, until all serve (AssertionError otherwise)."""
        self.run(self.supervisor.start())
        if wait:
            ok = self.run(self.supervisor.wait_all_ready(timeout), timeout + 5)
            if not ok:
                tails = {i.name: i.log_tail(20) for i in self.supervisor.instances}
                raise AssertionError(f"instances not ready: {self.supervisor.snapshot()} {tails}")

    def wait_serving(self, timeout: float = 60) -> None:
        """Wait until every instance serves again (after a restart)."""
        ok = self.run(self.supervisor.wait_all_ready(timeout), timeout + 5)
        assert ok, self.supervisor.snapshot()

    def point_at(self, base_url: str, state: ProcessState = ProcessState.READY) -> None:
        """Fault tests only: make the (never started) first instance look serving at ``base_url``."""

        async def set_() -> None:
            inst = self.supervisor.instances[0]
            inst.base_url = base_url
            inst.lifecycle.transition(state)
            self.supervisor.changed.set()
            self.supervisor.changed.clear()

        self.run(set_())

    def close(self) -> None:
        """Stop uvicorn and the supervisor's children, then the loop thread."""

        async def stop() -> None:
            if self._server is not None:
                self._server.should_exit = True
            if self._serve_task is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._serve_task, 10)
            await self.scheduler.close(3.0)
            await self.supervisor.stop(3.0)

        try:
            for fake in self.fakes:
                fake.close()
            try:
                self.run(stop(), 180)  # bounded inside (uvicorn 10 s, stop grace); seen past 180 s under CI load
            except TimeoutError:
                stacks = self.run(_stacks(), 10)
                raise AssertionError(f"the stack did not stop within 180 s; its tasks:\n{stacks}") from None
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()


async def _stacks() -> str:
    """Where every task of the running loop waits (a stack that did not stop says where it hung)."""
    out = io.StringIO()
    for task in asyncio.all_tasks():
        if task is not asyncio.current_task():
            task.print_stack(limit=12, file=out)
    return out.getvalue()


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class FakeUpstream:
    """A raw HTTP/1.1 server on the stack's loop whose every connection runs ``handler``.

    ``handler(reader, writer, n)`` gets the n-th accepted connection (0-based). Helpers below read
    a request and write responses. ``connections`` counts accepted connections and ``requests``
    keeps the bodies received.
    """

    def __init__(self, stack: Stack, handler: Handler) -> None:
        self.stack = stack
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.url = stack.run(self._start())
        stack.fakes.append(self)

    async def _start(self) -> str:
        async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            n = self.connections
            self.connections += 1
            task = asyncio.current_task()
            assert task is not None
            self._tasks.add(task)
            try:
                await self.handler(reader, writer, n)
            except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
                pass
            finally:
                writer.close()
                self._tasks.discard(task)

        self._server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def read_request(self, reader: asyncio.StreamReader) -> bytes | None:
        """Read one request; return its body, or None when the client closed the connection."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        body = await reader.readexactly(length)
        self.requests.append(body)
        return body

    @staticmethod
    async def write_json(writer: asyncio.StreamWriter, obj: Any, status: int = 200) -> None:
        body = json.dumps(obj).encode()
        writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: keep-alive\r\n\r\n".encode()
            + body
        )
        await writer.drain()

    @staticmethod
    async def write_sse_head(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        await writer.drain()

    @staticmethod
    async def write_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()

    @staticmethod
    async def end_chunks(writer: asyncio.StreamWriter) -> None:
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    def close(self) -> None:
        async def stop() -> None:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=5)
            if self._server is not None:
                self._server.close()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._server.wait_closed(), 5)
                self._server = None

        self.stack.run(stop())


def chat_completion(
    content: str, *, reasoning: str | None = None, timings: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A llama-server-shaped non-streamed chat completion."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    body: dict[str, Any] = {
        "choices": [{"finish_reason": "stop", "index": 0, "message": message}],
        "created": 0,
        "model": "demo",
        "object": "chat.completion",
        "id": "chatcmpl-fake",
        "usage": {"completion_tokens": 3, "prompt_tokens": 5, "total_tokens": 8},
    }
    if timings is not None:
        body["timings"] = timings
    return body


def sse_event(obj: Any) -> bytes:
    """One SSE ``data:`` event."""
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def delta_chunk(content: str | None = None, *, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    """A llama-server-shaped streamed chat chunk."""
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    chunk: dict[str, Any] = {
        "choices": [{"finish_reason": finish, "index": 0, "delta": delta}],
        "created": 0,
        "id": "chatcmpl-fake",
        "model": "demo",
        "object": "chat.completion.chunk",
    }
    chunk.update(extra)
    return chunk


def real_stack(
    tmp_path: Path,
    model: Path,
    build: Any,
    *,
    server: dict[str, Any] | None = None,
    models: list[dict[str, Any]] | None = None,
    wait: bool = True,
    policy: SupervisorPolicy | None = None,
    peers: list[dict[str, Any]] | None = None,
) -> Stack:
    """The proxy in front of a real ``Supervisor`` running real llama-servers on ``model``.

    The instances come from the real launch plan (``orchestrator.launch.plan.plan_launch``, CPU) for
    ``build`` (the ``bin_info`` fixture).
    ``models`` holds ModelConfig fields per model (``path`` defaults to ``model``; default: one model
    ``demo`` with alias ``tiny``, 2 slots of 4096 tokens, embeddings on so ``/v1/embeddings`` can be passed through);
    ``policy`` replaces the fast supervisor policy.
    ``peers`` holds PeerConfig fields per peer (models.yaml ``peers:``).
    """
    from supervision_helpers import fast_policy

    from orchestrator.config.scaleout import PeerConfig
    from orchestrator.config.schema import ModelConfig, ServerConfig, Timeouts
    from orchestrator.launch.plan import plan_launch
    from orchestrator.native.capabilities import probe_capabilities

    server = dict(server or {})
    server.setdefault("timeouts", Timeouts(load=120))
    if models is None:
        models = [
            {
                "name": "demo",
                "aliases": ["tiny"],
                "parallel": 2,
                "ctx_size": 8192,
                "extra_args": ["--embeddings", "--pooling", "mean"],
            }
        ]
    config = Config(
        server=ServerConfig(**server),
        models=[ModelConfig(**{"path": str(model), **m}) for m in models],
        peers=[PeerConfig(**p) for p in peers or []],
    )
    specs = plan_launch(config, gpus=[], build=build, capabilities=probe_capabilities(build), check_ports=False)
    stack = Stack(config, specs, tmp_path / "logs", policy=policy or fast_policy())
    try:
        if wait:
            stack.start_instances()
    except BaseException:
        stack.close()
        raise
    return stack
