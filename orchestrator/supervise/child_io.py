"""Talking to one supervised llama-server child: its log output and its HTTP endpoint.

``ChildIO`` is mixed into ``orchestrator.supervise.instance.Instance``:

- the log pump copies the child's merged stdout/stderr, line by line, into the log file and
  the in-memory tails (``log_tail``), learns the port from ``listening on ...`` and counts
  speculative-batch failures;
- the probes ask ``/health`` (``_probe_health``), find a ``--port 0`` child's port from its
  listening socket (``_discover_port``) and confirm through ``/props`` that the server on the
  port is our child serving our model (``_verify_identity``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from orchestrator.host import process
from orchestrator.supervise.readiness import Health, classify_health, is_spec_batch_failure, parse_listening_port
from orchestrator.supervise.states import SupervisorPolicy

if TYPE_CHECKING:
    from orchestrator.launch.plan import InstanceSpec


class ChildIO:
    """Log pump and probes for ``Instance`` (which sets every attribute below in ``__init__``)."""

    spec: InstanceSpec
    policy: SupervisorPolicy
    base_url: str | None
    _tail: collections.deque[str]
    _run_tail: collections.deque[str]
    _last_output: float
    _log_file: Any
    _proc: asyncio.subprocess.Process | None
    _pump_task: asyncio.Task[None] | None
    _client: httpx.AsyncClient | None

    _notify: Callable[[], None]  # Instance._notify
    record_error: Callable[[str, str], None]  # SpecWatch.record_error

    def log_tail(self, n: int = 50) -> list[str]:
        """The last ``n`` lines the child wrote (stdout and stderr, all launches)."""
        if n <= 0:
            return []
        return list(self._tail)[-n:]

    # ----------------------------------------------------------------- probes

    async def _probe_health(self) -> Health:
        assert self._client is not None and self.base_url is not None
        try:
            resp = await self._client.get(f"{self.base_url}/health")
        except httpx.HTTPError:
            return Health.UNREACHABLE
        return classify_health(resp.status_code, resp.content)

    def _discover_port(self) -> None:
        """Learn a ``--port 0`` child's port while it loads, from its listening socket.

        The log line ``listening on ...`` comes only after the load (``server.cpp``), but the
        HTTP server binds before loading so that ``/health`` can answer 503.
        """
        if self._proc is None:
            return
        ports = process.listening_ports(self._proc.pid)
        if len(ports) == 1:
            self.base_url = f"http://{self.spec.host}:{ports[0]}"
            self._notify()

    async def _verify_identity(self) -> str | None:
        """Confirm the server on ``base_url`` is our child serving our model (S02)."""
        assert self._client is not None and self.base_url is not None and self._proc is not None
        if self._proc.returncode is not None:
            return f"the child exited (code {self._proc.returncode}) but {self.base_url} answers: another server holds the port"
        port = int(self.base_url.rsplit(":", 1)[1])
        ports = process.listening_ports(self._proc.pid)
        if ports and port not in ports:
            return f"{self.base_url} is answered by another process, not by our llama-server (pid {self._proc.pid})"
        try:
            resp = await self._client.get(f"{self.base_url}/props")
            props = resp.json()
        except (httpx.HTTPError, json.JSONDecodeError, ValueError) as err:
            return f"GET {self.base_url}/props failed ({err}); cannot confirm the model"
        alias = props.get("model_alias") if isinstance(props, dict) else None
        path = props.get("model_path") if isinstance(props, dict) else None
        if alias == self.spec.alias or (path and _same_file(path, self.spec.gguf)):
            return None
        return (
            f"{self.base_url}/props reports model {alias!r} ({path}), expected {self.spec.alias!r} "
            f"({self.spec.gguf}); another server may be answering on this port"
        )

    # ----------------------------------------------------------------- log pump

    async def _pump(self, proc: asyncio.subprocess.Process) -> None:
        """Copy the child's merged stdout/stderr to the log file and the tail as lines arrive."""
        assert proc.stdout is not None
        pending = b""
        while True:
            chunk = await proc.stdout.read(65536)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                self._on_line(raw.rstrip(b"\r").decode("utf-8", errors="replace"))
        if pending:
            self._on_line(pending.decode("utf-8", errors="replace"))

    def _on_line(self, line: str) -> None:
        self._last_output = time.monotonic()
        self._write_line(line)
        self._tail.append(line)
        self._run_tail.append(line)
        if self.base_url is None:
            port = parse_listening_port(line)
            if port:
                self.base_url = f"http://{self.spec.host}:{port}"
        if is_spec_batch_failure(line):
            self.record_error("spec_batch", line)

    def _write_line(self, line: str) -> None:
        if self._log_file is not None:
            self._log_file.write(line + "\n")
            self._log_file.flush()

    async def _finish_pump(self) -> None:
        """Let the pump read the child's last lines (bounded), then drop it."""
        task, self._pump_task = self._pump_task, None
        if task is None:
            return
        try:
            await asyncio.wait_for(task, timeout=self.policy.exit_drain)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _same_file(a: str, b: Path) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False
