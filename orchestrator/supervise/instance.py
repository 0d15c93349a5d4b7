"""One supervised llama-server (``Instance``): start, wait ready, verify, watch, restart, stop.

Each ``Instance`` has exactly one writer of its state: its lifecycle task (``Instance._lifecycle``),
a loop ``spawn -> wait ready -> verify -> watch -> on exit decide restart / backoff / failed``
(after llama-swap's ``process.go``). Everything else (the proxy, ``up``, the bench) only reads
fields, bumps counters, or sends requests to that loop through a queue (stop, relaunch without
speculation); nothing outside the loop assigns ``state``.

Readiness follows the child (after Ollama ``llm/llama_server.go``): ``/health`` is polled every
``SupervisorPolicy.poll_interval`` seconds, the child's liveness is checked on every poll, and
the load deadline (``server.timeouts.load``) is counted from the child's last log line, so a
child that keeps logging keeps its chance (up to ``load_cap_factor`` times the timeout).

The drafting watch lives in ``orchestrator.supervise.spec_watch`` and the log pump and HTTP probes in
``orchestrator.supervise.child_io``; both are mixed into ``Instance``. States and timing rules are in
``orchestrator.supervise.states``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx

from orchestrator.host import process
from orchestrator.supervise.child_io import ChildIO
from orchestrator.supervise.readiness import Health, failure_lines
from orchestrator.supervise.spec_watch import SpecWatch
from orchestrator.supervise.states import RUNNING, SERVING, ProcessState, SupervisorPolicy

if TYPE_CHECKING:
    from orchestrator.config.schema import Config, ModelConfig
    from orchestrator.launch.plan import InstanceSpec


_Request = Literal["stop", "relaunch_without_spec"]


class Instance(SpecWatch, ChildIO):
    """One supervised llama-server (one replica of one model).

    Read freely: ``spec``, ``state``, ``base_url``, ``pid`` (the current or last child), ``restarts``, ``exit_code``,
    ``started_at``/``ready_at`` (Unix time, seconds), ``requests``, ``speculation``,
    ``warnings``, ``message`` (why it FAILED or is RESTARTING), ``decode_tps`` (tok/s of the
    last response), ``acceptance`` (accepted / drafted so far). The proxy increments and
    decrements ``in_flight`` around each upstream request (each increment also counts one
    request in ``requests``).
    """

    def __init__(
        self,
        spec: InstanceSpec,
        config: Config,
        *,
        log_dir: Path,
        policy: SupervisorPolicy,
        on_change: Any = None,
    ) -> None:
        self.spec = spec
        self.policy = policy
        self.state = ProcessState.STOPPED
        self.base_url: str | None = None
        self.pid: int | None = None
        self.restarts = 0
        self.exit_code: int | None = None
        self.started_at: float | None = None
        self.ready_at: float | None = None
        self.requests = 0
        self.message: str | None = None
        self.speculation: Literal["off", "unknown", "active", "inactive"] = "unknown" if spec.spec_type else "off"
        self.decode_tps: float | None = None
        self.drafted = 0
        self.accepted = 0
        self.log_path = log_dir / f"{spec.name}.log"
        self._in_flight = 0
        self._config = config
        self._model_cfg: ModelConfig | None = next((m for m in config.models if m.name == spec.model), None)
        self._load_timeout = float(config.server.timeouts.load)
        self._on_change = on_change
        self._warnings: dict[str, str] = {}
        self._tail: collections.deque[str] = collections.deque(maxlen=policy.tail_lines)
        self._run_tail: collections.deque[str] = collections.deque(maxlen=200)  # this launch only
        self._launches = 0
        self._last_output = 0.0  # monotonic time of the last log line
        self._crash_times: list[float] = []
        self._degraded = False
        self._relaunch_requested = False
        self._generations = 0
        self._window: collections.deque[tuple[int, int]] = collections.deque()
        self._spec_batch_streak = 0
        self._requests: asyncio.Queue[tuple[_Request, float]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._exit_task: asyncio.Task[int] | None = None
        self._pump_task: asyncio.Task[None] | None = None
        self._req_task: asyncio.Task[tuple[_Request, float]] | None = None
        self._client: httpx.AsyncClient | None = None
        self._log_file: Any = None

    # ----------------------------------------------------------------- readers

    @property
    def name(self) -> str:
        """The instance name, e.g. ``demo-0``."""
        return self.spec.name

    @property
    def in_flight(self) -> int:
        """Requests currently forwarded to this instance (maintained by the proxy)."""
        return self._in_flight

    @in_flight.setter
    def in_flight(self, value: int) -> None:
        if value > self._in_flight:
            self.requests += value - self._in_flight
        self._in_flight = max(0, value)

    @property
    def warnings(self) -> list[str]:
        """Current warnings, one line each (speculation inactive, low acceptance, fallback...)."""
        return list(self._warnings.values())

    def snapshot(self) -> dict[str, Any]:
        """One row for ``/status`` and ``orchestrator status`` (JSON-serialisable)."""
        port = None
        if self.base_url:
            port = int(self.base_url.rsplit(":", 1)[1])
        rolling, rolling_n = self.rolling_acceptance
        row: dict[str, Any] = {
            "name": self.name,
            "model": self.spec.model,
            "replica": self.spec.replica,
            "state": self.state.value,
            "pid": self.pid if self.state in RUNNING else None,  # no stale pid once the child is gone
            "last_pid": self.pid,
            "port": port,
            "base_url": self.base_url,
            "gpus": list(self.spec.gpus),
            "gguf": str(self.spec.gguf),
            "started_at": self.started_at,
            "ready_at": self.ready_at,
            "uptime_s": (time.time() - self.ready_at) if (self.ready_at and self.state in SERVING) else None,
            "restarts": self.restarts,
            "requests": self.requests,
            "in_flight": self.in_flight,
            "decode_tps": self.decode_tps,
            "speculation": self.speculation,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance": self.acceptance,
            "rolling_acceptance": rolling,
            "rolling_drafted": rolling_n,
            "warnings": self.warnings,
            "exit_code": self.exit_code,
            "message": self.message,
            "log_path": str(self.log_path),
            "log_tail": self.log_tail(20) if self.state in (ProcessState.FAILED, ProcessState.RESTARTING) else [],
        }
        return row

    # ----------------------------------------------------------------- requests to the lifecycle loop

    def start(self) -> None:
        """Launch the lifecycle task (STOPPED or FAILED -> LOADING); no-op while it runs.

        Must be called from the event-loop thread (the parent-death signal follows the
        thread that forks).
        """
        if self._task is not None and not self._task.done():
            return
        if self.state is ProcessState.FAILED:
            self._crash_times.clear()
        self._requests = asyncio.Queue()  # drop requests meant for an earlier run
        # transition: STOPPED/FAILED -> LOADING, made here because no lifecycle task exists yet
        # (so this is still the only writer) and waiters must not see STOPPED after start()
        self._transition(ProcessState.LOADING, "starting")
        self._task = asyncio.get_running_loop().create_task(self._lifecycle(), name=f"supervise {self.name}")

    async def stop(self, grace: float) -> None:
        """Stop the child (SIGTERM its group, SIGKILL after ``grace`` s) and end the lifecycle.

        Returns once the child is reaped; the state is then STOPPED (or stays FAILED).
        """
        task = self._task
        if task is None or task.done():
            return
        self._requests.put_nowait(("stop", grace))
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=grace + 10.0)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def kill_now(self) -> None:
        """SIGKILL the child's group immediately (synchronous last resort, e.g. at exit)."""
        if self._proc is not None and self._proc.returncode is None:
            process.signal_group(self._proc.pid, signal.SIGKILL)

    # ----------------------------------------------------------------- the one writer of state

    def _transition(self, new: ProcessState, message: str | None = None) -> None:
        """Change state. Called only from the lifecycle task."""
        self.state = new
        self.message = message
        if new in SERVING:
            self.ready_at = time.time()
        self._notify()

    def _notify(self) -> None:
        if self._on_change is not None:
            self._on_change(self)

    async def _lifecycle(self) -> None:
        self._client = httpx.AsyncClient(trust_env=False, timeout=self.policy.health_timeout)
        try:
            await self._lifecycle_loop()
        finally:
            if self._proc is not None and self._proc.returncode is None:
                # cancelled or crashed in here: never leave the child behind
                await process.stop_process(self._proc, 0.0)
                self.pid = None
            await self._finish_pump()
            if self._req_task is not None:
                self._req_task.cancel()
                self._req_task = None
            await self._client.aclose()
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None

    async def _lifecycle_loop(self) -> None:
        while True:
            if self._relaunch_requested and self.spec.spec_type is not None:
                self._apply_spec_fallback()
            # transition: launch (first start, after backoff, after fallback)
            self._transition(ProcessState.LOADING, "loading model")
            try:
                await self._launch()
            except OSError as err:
                # transition: cannot exec at all -> FAILED (retrying cannot help)
                self._transition(ProcessState.FAILED, f"cannot start {self.spec.argv[0]}: {err}")
                return
            outcome, detail = await self._wait_ready()
            if outcome == "ready":
                # transition: /health ok and identity verified -> serving
                self._transition(
                    ProcessState.DEGRADED if self._degraded else ProcessState.READY,
                    "serving without speculation (fallback)" if self._degraded else None,
                )
                outcome, detail = await self._watch()
            grace = detail if outcome == "stop" and isinstance(detail, float) else self.policy.stop_grace
            if outcome == "stop":
                await self._kill(grace)
                # transition: asked to stop -> STOPPED
                self._transition(ProcessState.STOPPED, "stopped")
                return
            if outcome == "relaunch_without_spec":
                await self._kill(grace)
                continue  # transition happens at the top of the loop: LOADING without spec
            if outcome in ("timeout", "mismatch"):
                await self._kill(grace)
                # transition: load timeout / not our server -> FAILED
                self._transition(ProcessState.FAILED, str(detail))
                return
            if outcome == "stalled":
                self._warnings["stall"] = str(detail)
            # a crash (exit or stall): kill what is left of the group (a stalled child, or
            # anything an exited one forked), then restart with backoff or give up on a crash loop
            await self._kill(grace if outcome == "stalled" else 0.0)
            self.exit_code = self._proc.returncode if self._proc else None
            now = time.monotonic()
            self._crash_times = [t for t in self._crash_times if now - t <= self.policy.crash_loop_window]
            self._crash_times.append(now)
            recent = len(self._crash_times)
            why = detail if outcome == "stalled" else describe_exit(self.exit_code)
            cause = failure_lines(self._run_tail, 3)
            if recent >= self.policy.crash_loop_count:
                # transition: crash loop -> FAILED
                self._transition(
                    ProcessState.FAILED,
                    f"crash loop: {recent} crashes within {self.policy.crash_loop_window:g} s; last {why}"
                    + (f"; log: {' | '.join(cause)}" if cause else ""),
                )
                return
            delay = min(self.policy.backoff_max, self.policy.backoff_base * 2 ** (recent - 1))
            self.restarts += 1
            # transition: crash -> RESTARTING (backoff)
            self._transition(
                ProcessState.RESTARTING,
                f"{why}; restarting in {delay:g} s" + (f"; log: {' | '.join(cause)}" if cause else ""),
            )
            if await self._backoff(delay) == "stop":
                # transition: stopped during backoff -> STOPPED
                self._transition(ProcessState.STOPPED, "stopped")
                return

    # ----------------------------------------------------------------- phases

    async def _launch(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self._log_file is None:
            self._log_file = open(self.log_path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115
        self._launches += 1
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        marker = f"===== orchestrator: launch #{self._launches} of {self.name} at {stamp}: {' '.join(self.spec.argv)}"
        self._write_line(marker)
        self._run_tail.clear()
        self.base_url = f"http://{self.spec.host}:{self.spec.port}" if self.spec.port else None
        self.exit_code = None
        self.pid = None
        self._last_output = time.monotonic()
        self._proc = await process.spawn(self.spec.argv, env=self.spec.env)
        self.pid = self._proc.pid
        self.started_at = time.time()
        self.ready_at = None
        self._exit_task = asyncio.get_running_loop().create_task(self._proc.wait())
        self._pump_task = asyncio.get_running_loop().create_task(self._pump(self._proc))
        self._notify()

    async def _next_event(self, timeout: float) -> tuple[str, float | None] | None:
        """Wait up to ``timeout`` s for a request or the child's exit; None on a plain tick."""
        if self._req_task is None:
            self._req_task = asyncio.get_running_loop().create_task(self._requests.get())
        waits: set[asyncio.Task[Any]] = {self._req_task}
        if self._exit_task is not None:
            waits.add(self._exit_task)
        done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if self._req_task in done:
            kind, arg = self._req_task.result()
            self._req_task = None
            return kind, arg
        if self._exit_task is not None and self._exit_task in done:
            return "exited", None
        return None

    async def _wait_ready(self) -> tuple[str, Any]:
        started = time.monotonic()
        while True:
            event = await self._next_event(self.policy.poll_interval)
            if event is not None:
                return event
            if self.base_url is None:
                self._discover_port()
            if self.base_url is not None and await self._probe_health() is Health.READY:
                problem = await self._verify_identity()
                return ("mismatch", problem) if problem else ("ready", None)
            now = time.monotonic()
            quiet = now - max(started, self._last_output)
            if quiet > self._load_timeout or now - started > self._load_timeout * self.policy.load_cap_factor:
                tail = list(self._run_tail)[-10:]
                return "timeout", (
                    f"not ready after {now - started:.0f} s (load timeout {self._load_timeout:g} s, "
                    "server.timeouts.load); "
                    + ("last log lines:\n" + "\n".join(tail) if tail else "the server wrote nothing")
                )

    async def _watch(self) -> tuple[str, Any]:
        last_ok = time.monotonic()
        while True:
            event = await self._next_event(self.policy.watch_interval)
            if event is not None:
                return event
            now = time.monotonic()
            if await self._probe_health() is Health.READY:
                last_ok = time.monotonic()
                continue
            silent = now - max(last_ok, self._last_output)
            if self.in_flight > 0 and silent > self.policy.stall_timeout:
                return "stalled", (
                    f"stalled: {self.in_flight} request(s) in flight, no /health answer and no output "
                    f"for {silent:.0f} s; killed and restarted"
                )

    async def _backoff(self, delay: float) -> str | None:
        """Sleep ``delay`` s unless a request arrives; returns "stop" when asked to stop."""
        self._exit_task = None
        deadline = time.monotonic() + delay
        while (left := deadline - time.monotonic()) > 0:
            event = await self._next_event(left)
            if event is None:
                continue
            if event[0] == "stop":
                return "stop"
        return None

    async def _kill(self, grace: float) -> None:
        if self._proc is not None:
            await process.stop_process(self._proc, grace)
        await self._finish_pump()


def describe_exit(code: int | None) -> str:
    """``-9`` -> ``"killed by signal 9 (SIGKILL)"``; ``1`` -> ``"exited with code 1"`` (Popen's convention)."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-code} ({name})"
    return f"exited with code {code}"
