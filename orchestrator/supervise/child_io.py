"""Talking to one supervised llama-server child: its process (``ChildProcess``), its log output
(``ChildLog``) and its HTTP endpoint (``ChildProbe``).

- ``ChildLog`` copies the child's merged stdout/stderr, line by line, into ``<instance>.log``
  (appended across launches, each launch headed by a marker line) and two in-memory tails (all
  launches, this launch only), remembers when the child last wrote anything, a partial line
  included (the load and stall deadlines count from it), and hands each line to its owner
  (which learns the port, counts speculative-batch failures and reads the GPU offload from it).
  A log file that cannot be written (full, read-only or forbidden folder: ``host/disk.py``)
  leaves only the in-memory tail (``SupervisorPolicy.tail_lines``); reopening is retried every
  ``REOPEN_AFTER`` seconds.
- ``ChildProcess`` spawns the child, turns its exit into an awaitable task and stops it.
- ``ChildProbe`` asks ``/health`` and ``/slots`` (is the main loop turning?), finds a
  ``--port 0`` child's port from its listening socket,
  and confirms through ``/props`` that the server on the port is our child serving our model.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import httpx

from orchestrator.host import disk, process
from orchestrator.supervise.readiness import Health, classify_health

if TYPE_CHECKING:
    from orchestrator.launch.spec import InstanceSpec

RUN_TAIL_LINES = 200  # lines of the current launch kept for failure messages
REOPEN_AFTER = 30.0  # seconds between attempts to reopen a log file that could not be written
# seconds a written line may wait in the file's buffer: llama-server logs ~7 lines per request,
# and a flush (a write syscall) per line was a visible share of the proxy's CPU per token
FLUSH_AFTER = 0.1


class ChildLog:
    """The log file, the tails and the log pump of one instance.

    Args:
        path: the instance's log file (``<log_dir>/<instance>.log``), appended to.
        tail_lines: lines kept in memory across launches (``SupervisorPolicy.tail_lines``).
        on_line: called with each line the child writes, after it was logged.
    """

    def __init__(self, path: Path, tail_lines: int, on_line: Callable[[str], None]) -> None:
        self.path = path
        self.last_output = 0.0  # monotonic time of the last line (or of the launch)
        self._tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._run_tail: collections.deque[str] = collections.deque(maxlen=RUN_TAIL_LINES)
        self._on_line = on_line
        self._file: TextIO | None = None
        self._failed_at: float | None = None  # monotonic time the file last failed (disk fault)
        self._pump_task: asyncio.Task[None] | None = None
        self._flush_timer: asyncio.TimerHandle | None = None

    def tail(self, n: int = 50) -> list[str]:
        """The last ``n`` lines the child wrote (stdout and stderr, all launches)."""
        return list(self._tail)[-n:] if n > 0 else []

    def run_tail(self, n: int = RUN_TAIL_LINES) -> list[str]:
        """The last ``n`` lines of the current launch only."""
        return list(self._run_tail)[-n:] if n > 0 else []

    def begin_launch(self, marker: str) -> None:
        """Open the file (once), write the launch ``marker`` line, start a new launch tail."""
        self._failed_at = None  # a launch retries the file at once
        self._write(marker)
        self.flush()
        self._run_tail.clear()
        self.last_output = time.monotonic()

    def start_pump(self, proc: asyncio.subprocess.Process) -> None:
        """Copy ``proc``'s output as it arrives, in a task, until the pipe closes."""
        self._pump_task = asyncio.get_running_loop().create_task(self._pump(proc))

    async def finish_pump(self, drain: float) -> None:
        """Let the pump read the child's last lines (at most ``drain`` seconds), then drop it."""
        task, self._pump_task = self._pump_task, None
        if task is None:
            return
        try:
            await asyncio.wait_for(task, timeout=drain)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def flush(self) -> None:
        """Write the buffered lines to the file now."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        if self._file is not None and not disk.attempt(f"log {self.path.name}", self.path, self._flush_file):
            self._failed()

    def close(self) -> None:
        """Close the log file (it is reopened by the next ``begin_launch``)."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        if self._file is not None:
            with contextlib.suppress(OSError):  # a full disk fails the last flush too
                self._file.close()
            self._file = None

    async def _pump(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        pending = b""
        while chunk := await proc.stdout.read(65536):
            # any output counts as a sign of life, not only complete lines: llama.cpp prints
            # its tensor-loading progress as dots with no newline for as long as the load lasts
            self.last_output = time.monotonic()
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                self._line(raw.rstrip(b"\r").decode("utf-8", errors="replace"))
        if pending:
            self._line(pending.decode("utf-8", errors="replace"))

    def _line(self, line: str) -> None:
        self.last_output = time.monotonic()
        self._write(line)
        self._tail.append(line)
        self._run_tail.append(line)
        self._on_line(line)

    def _open(self) -> TextIO:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return open(self.path, "a", encoding="utf-8", errors="replace")

    def _write(self, line: str) -> None:
        if self._file is None:
            if self._failed_at is not None and time.monotonic() - self._failed_at < REOPEN_AFTER:
                return
            self._file = disk.attempt(f"log {self.path.name}", self.path, self._open)
        if self._file is not None and disk.attempt(f"log {self.path.name}", self.path, lambda: self._append(line)):
            self._schedule_flush()
            return
        self._failed()

    def _schedule_flush(self) -> None:
        if self._flush_timer is not None:
            return
        try:
            self._flush_timer = asyncio.get_running_loop().call_later(FLUSH_AFTER, self.flush)
        except RuntimeError:  # no event loop (a synchronous caller): flush at once
            self.flush()

    def _failed(self) -> None:
        self._failed_at = time.monotonic()
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()  # flushing what the disk took no more fails again
            self._file = None

    def _append(self, line: str) -> bool:
        assert self._file is not None
        self._file.write(line + "\n")
        return True

    def _flush_file(self) -> bool:
        assert self._file is not None
        self._file.flush()
        return True


class ChildProbe:
    """HTTP probes of one child (``/health``, ``/props``) and port discovery.

    Args:
        timeout: seconds per HTTP request (``SupervisorPolicy.health_timeout``).
        auth: the child's key (its instance's ``ChildLock.auth``; None for an unlocked child).
    """

    def __init__(self, timeout: float, auth: httpx.Auth | None = None) -> None:
        # verify=False: plain HTTP on loopback; the default would load the CA bundle (about 40 ms
        # on the event loop at every instance start)
        self._client = httpx.AsyncClient(trust_env=False, timeout=timeout, auth=auth, verify=False)
        self.last_props: dict[str, Any] | None = None  # the last /props verify_identity read

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()

    async def health(self, base_url: str) -> Health:
        """What ``GET base_url/health`` says (``Health.UNREACHABLE`` when nothing answers)."""
        try:
            resp = await self._client.get(f"{base_url}/health")
        except httpx.HTTPError:
            return Health.UNREACHABLE
        return classify_health(resp.status_code, resp.content)

    async def main_loop_answers(self, base_url: str) -> Health:
        """Whether llama-server's main loop still turns: ``GET base_url/slots``.

        ``/health`` is answered by an HTTP thread and says ok even while the main loop is stuck
        inside one slot (measured: a sampler list that loops at 100% CPU). ``/slots`` is answered
        by a high-priority task that the main loop takes between two batches (``server-context.cpp``
        ``get_slots``), so it answers within one batch or not at all. A server started with
        ``--no-slots`` answers 501 at once (an ``--api-key`` 401, a build without the route 404),
        from the HTTP thread: then ``/health`` is all there is to ask.

        Returns:
            ``Health.READY`` when the loop answered, ``UNREACHABLE`` when nothing answered within
            the timeout; for a refused ``/slots``, what ``/health`` says.
        """
        return (await self.slots(base_url))[0]

    async def slots(self, base_url: str) -> tuple[Health, Any]:
        """``main_loop_answers`` with the ``/slots`` answer (parsed JSON; None when there is none)."""
        try:
            resp = await self._client.get(f"{base_url}/slots")
        except httpx.HTTPError:
            return Health.UNREACHABLE, None
        if resp.status_code != 200:  # --no-slots (501), an --api-key in extra_args (401), no route (404)
            return await self.health(base_url), None
        try:
            return Health.READY, resp.json()
        except ValueError:
            return Health.READY, None

    @staticmethod
    def discover_port(pid: int, host: str) -> str | None:
        """The base URL of a ``--port 0`` child ``pid`` while it loads, from its one listening socket.

        The log line ``listening on ...`` comes only after the load (``server.cpp``), but the
        HTTP server binds before loading so that ``/health`` can answer 503. None while the child
        listens on no port, or on several.
        """
        ports = process.listening_ports(pid)
        return f"http://{host}:{ports[0]}" if len(ports) == 1 else None

    async def verify_identity(self, base_url: str, proc: asyncio.subprocess.Process, spec: InstanceSpec) -> str | None:
        """None when the server on ``base_url`` is our child ``proc`` serving ``spec``'s model, else why not."""
        if proc.returncode is not None:
            return f"the child exited (code {proc.returncode}) but {base_url} answers: another server holds the port"
        port = int(base_url.rsplit(":", 1)[1])
        ports = process.listening_ports(proc.pid)
        if ports and port not in ports:
            return f"{base_url} is answered by another process, not by our llama-server (pid {proc.pid})"
        try:
            resp = await self._client.get(f"{base_url}/props")
            props = resp.json()
        except (httpx.HTTPError, json.JSONDecodeError, ValueError) as err:
            return f"GET {base_url}/props failed ({err}); cannot confirm the model"
        self.last_props = props if isinstance(props, dict) else None
        alias = props.get("model_alias") if isinstance(props, dict) else None
        path = props.get("model_path") if isinstance(props, dict) else None
        if alias == spec.alias or (path and _same_file(path, spec.gguf)):
            return None
        return (
            f"{base_url}/props reports model {alias!r} ({path}), expected {spec.alias!r} "
            f"({spec.gguf}); another server may be answering on this port"
        )


def _same_file(a: str, b: Path) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


class ChildProcess:
    """The current llama-server process of one instance: spawn, its exit as a task, stop, kill.

    Only asyncio's child watcher reaps the process (see ``orchestrator.host.process``), so the
    exit status it reports is the real one.
    """

    def __init__(self) -> None:
        self.proc: asyncio.subprocess.Process | None = None
        self.exited: asyncio.Task[int] | None = None  # done once the process exited; None in a backoff

    @property
    def running(self) -> bool:
        """True while a spawned process has not exited (or not been reaped) yet."""
        return self.proc is not None and self.proc.returncode is None

    @property
    def returncode(self) -> int | None:
        """The last process's exit status (negative: killed by that signal), None while it runs."""
        return self.proc.returncode if self.proc is not None else None

    async def spawn(
        self,
        argv: tuple[str, ...],
        env: dict[str, str],
        folders: tuple[Path | None, ...] = (),
        unset: tuple[str, ...] = (),
    ) -> asyncio.subprocess.Process:
        """Start ``argv`` (``process.spawn``: own process group, parent-death signal), after
        creating ``folders`` it needs (mode 0700; e.g. ``--slot-save-path``, which llama-server
        refuses unless it is a directory, and whose files hold prompts); ``unset`` names variables
        of our environment the child must not inherit.

        Raises:
            OSError: the executable is missing or not executable, or a folder cannot be made.
        """
        for folder in folders:
            if folder is not None:
                folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.proc = await process.spawn(argv, env=env, unset=unset)
        self.exited = asyncio.get_running_loop().create_task(self.proc.wait())
        return self.proc

    async def stop(self, grace: float) -> None:
        """SIGTERM the group, SIGKILL after ``grace`` seconds, reap (no-op without a process)."""
        if self.proc is not None:
            await process.stop_process(self.proc, grace)

    def kill_now(self) -> None:
        """SIGKILL the group at once (synchronous last resort, e.g. at exit)."""
        if self.proc is not None and self.proc.returncode is None:
            process.signal_group(self.proc.pid, signal.SIGKILL)
