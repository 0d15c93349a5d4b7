"""Supervise one llama-server per ``InstanceSpec``: start, wait ready, verify, watch, restart, stop.

Each ``Instance`` has exactly one writer of its state: its lifecycle task (``Instance._lifecycle``),
a loop ``spawn -> wait ready -> verify -> watch -> on exit decide restart / backoff / failed``
(after llama-swap's ``process.go``). Everything else (the proxy, ``up``, the bench) only reads
fields, bumps counters, or sends requests to that loop through a queue (stop, relaunch without
speculation); nothing outside the loop assigns ``state``.

Readiness follows the child (after Ollama ``llm/llama_server.go``): ``/health`` is polled every
``SupervisorPolicy.poll_interval`` seconds, the child's liveness is checked on every poll, and
the load deadline (``server.timeouts.load``) is counted from the child's last log line, so a
child that keeps logging keeps its chance (up to ``load_cap_factor`` times the timeout).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import json
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx

from orchestrator import process
from orchestrator.readiness import (
    Health,
    classify_health,
    failure_lines,
    is_spec_batch_failure,
    parse_listening_port,
)

if TYPE_CHECKING:
    from orchestrator.config import Config, ModelConfig
    from orchestrator.launch import InstanceSpec


class ProcessState(enum.Enum):
    """Lifecycle of one supervised llama-server.

    What each public call does in each state (after llama-swap ``process.go``):

    ===================  =========  ==========================  ======================  ====================  ===========================
    call / event         STOPPED    LOADING                     READY / DEGRADED        RESTARTING            FAILED
    ===================  =========  ==========================  ======================  ====================  ===========================
    ``start()``          spawn ->   no-op                       no-op                   no-op                 respawn -> LOADING (counters
                         LOADING                                                                              kept, crash history cleared)
    ``stop(grace)``      no-op      SIGTERM group, SIGKILL      same -> STOPPED         cancel backoff ->     no-op (no process)
                                    after grace -> STOPPED                              STOPPED
    ``Supervisor.pick``  never      never                       eligible                never                 never
    ``wait_for_replica`` None (1)   waits                       returns it              waits                 None (1)
    child exits          --         crash: RESTARTING (backoff) same                    --                    --
                                    or FAILED (crash loop)
    /health 200 + ok     --         verify /props -> READY      --                      --                    --
                                    (DEGRADED without spec),
                                    or FAILED on mismatch
    load timeout         --         kill -> FAILED + log tail   --                      --                    --
    stall (in flight,    --         --                          kill -> RESTARTING      --                    --
    no /health, no log)
    spec fallback        --         kill -> LOADING without     same                    applied at next       --
    request                         spec flags -> DEGRADED                              launch
    ===================  =========  ==========================  ======================  ====================  ===========================

    (1) ``wait_for_replica(model)`` returns None at once only when *every* replica of the model
    is STOPPED or FAILED; otherwise it waits for the others.
    """

    STOPPED = "stopped"
    LOADING = "loading"
    READY = "ready"
    DEGRADED = "degraded"  # serving, but without speculation after a fallback
    RESTARTING = "restarting"  # waiting out the backoff after a crash
    FAILED = "failed"  # gave up: load timeout, identity mismatch, crash loop, cannot exec


SERVING = frozenset({ProcessState.READY, ProcessState.DEGRADED})  # may receive requests
STARTING = frozenset({ProcessState.LOADING, ProcessState.RESTARTING})  # will serve without anyone acting
TERMINAL = frozenset({ProcessState.STOPPED, ProcessState.FAILED})  # no process, no lifecycle task
RUNNING = frozenset({ProcessState.LOADING, ProcessState.READY, ProcessState.DEGRADED})  # a child exists


@dataclass(frozen=True)
class SupervisorPolicy:
    """Timing rules of the supervisor (seconds unless noted). Tests shrink them."""

    poll_interval: float = 0.25  # /health poll while loading
    watch_interval: float = 1.0  # /health poll while serving
    health_timeout: float = 2.0  # one /health request
    stall_timeout: float = 30.0  # in flight, no /health answer and no log output for this long -> restart
    backoff_base: float = 1.0  # first restart delay; doubles per recent crash
    backoff_max: float = 60.0
    crash_loop_count: int = 5  # this many crashes ...
    crash_loop_window: float = 60.0  # ... within this many seconds -> FAILED
    load_cap_factor: float = 3.0  # log output extends the load deadline up to this multiple
    stop_grace: float = 10.0  # SIGTERM -> SIGKILL for internal kills (stall, fallback, failure)
    exit_drain: float = 1.0  # after an exit, wait this long for the last log lines
    tail_lines: int = 500  # in-memory log tail (lines)
    draft_check_after: int = 3  # generations before "speculation inactive" is decided
    acceptance_window: int = 2000  # rolling acceptance over the last this many drafted tokens
    acceptance_min_drafted: int = 500  # judge acceptance only over at least this many drafted tokens
    spec_batch_failures: int = 3  # consecutive speculative-batch failures -> relaunch without spec


_Request = Literal["stop", "relaunch_without_spec"]


class Instance:
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
        self.speculation: Literal["off", "unknown", "active", "inactive"] = (
            "unknown" if spec.spec_type else "off"
        )
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

    @property
    def acceptance(self) -> float | None:
        """Accepted / drafted tokens since launch, or None before anything was drafted."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def rolling_acceptance(self) -> tuple[float | None, int]:
        """(acceptance, drafted tokens) over the last ``acceptance_window`` drafted tokens."""
        drafted = sum(d for d, _ in self._window)
        accepted = sum(a for _, a in self._window)
        return (accepted / drafted if drafted else None), drafted

    def log_tail(self, n: int = 50) -> list[str]:
        """The last ``n`` lines the child wrote (stdout and stderr, all launches)."""
        if n <= 0:
            return []
        return list(self._tail)[-n:]

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

    # ----------------------------------------------------------------- inputs from the proxy / bench

    def record_timings(self, timings: dict[str, Any]) -> None:
        """Account one response's llama-server ``timings``.

        Args:
            timings: the ``timings`` object of a completion (``predicted_n``,
                ``predicted_per_second`` in tok/s, and once anything was drafted ``draft_n`` and
                ``draft_n_accepted`` in tokens; see ``server-task.cpp``).

        Effects: decode tok/s for status; the drafting check (S03): on a speculative instance,
        ``speculation`` becomes ``active`` at the first ``draft_n > 0`` and ``inactive`` (with a
        warning) when ``draft_check_after`` generations drafted nothing; the rolling acceptance
        watch: below ``speculative.acceptance_floor`` over at least ``acceptance_min_drafted``
        drafted tokens gives a warning, and with ``spec_fallback: relaunch_without_spec`` a
        relaunch without speculation (state DEGRADED).
        """
        tps = timings.get("predicted_per_second")
        if isinstance(tps, (int, float)) and tps > 0:
            self.decode_tps = float(tps)
        self._spec_batch_streak = 0
        if self.speculation == "off":
            return
        predicted = timings.get("predicted_n")
        if isinstance(predicted, int) and predicted < 2:
            return  # one token can never be drafted; it proves nothing
        self._generations += 1
        drafted = int(timings.get("draft_n") or 0)
        accepted = int(timings.get("draft_n_accepted") or 0)
        if drafted > 0:
            if self.speculation != "active":
                self.speculation = "active"
                self._warnings.pop("spec-inactive", None)
                self._notify()
            self.drafted += drafted
            self.accepted += accepted
            self._window.append((drafted, accepted))
            while len(self._window) > 1 and sum(d for d, _ in self._window) - self._window[0][0] >= self.policy.acceptance_window:
                self._window.popleft()
            self._check_acceptance()
        elif self.speculation == "unknown" and self._generations >= self.policy.draft_check_after:
            self.speculation = "inactive"
            self._warnings["spec-inactive"] = (
                f"speculation inactive: {self._generations} generations drafted nothing (timings.draft_n = 0); "
                "check that the GGUF has a NextN/MTP head (orchestrator inspect) or set speculative.type: none"
            )
            self._notify()

    def record_error(self, kind: str, text: str) -> None:
        """Account an error seen by the proxy or in the child's log.

        Args:
            kind: ``"spec_batch"`` for llama-server's "failed to process speculative batch";
                any other kind is kept as the latest warning of that kind.
            text: the error text (one line).

        ``spec_batch_failures`` consecutive speculative-batch failures (no successful response in
        between) request a relaunch without speculation (state DEGRADED).
        """
        if kind != "spec_batch":
            self._warnings[f"error:{kind}"] = f"{kind}: {text.strip()[:300]}"
            self._notify()
            return
        self._spec_batch_streak += 1
        if self._spec_batch_streak >= self.policy.spec_batch_failures and self.speculation != "off":
            self._warnings["spec-batch"] = (
                f"{self._spec_batch_streak} consecutive speculative-batch failures "
                f"({text.strip()[:200]}); relaunching without speculation"
            )
            self._request_relaunch_without_spec()

    def _check_acceptance(self) -> None:
        floor = self._model_cfg.speculative.acceptance_floor if self._model_cfg else 0.0
        rate, drafted = self.rolling_acceptance
        if rate is None or drafted < self.policy.acceptance_min_drafted:
            return
        if rate >= floor:
            self._warnings.pop("acceptance", None)
            return
        fallback = self._model_cfg.speculative.spec_fallback if self._model_cfg else "warn"
        self._warnings["acceptance"] = (
            f"acceptance {rate:.2f} over the last {drafted} drafted tokens is below the floor {floor:.2f}"
            + ("; relaunching without speculation" if fallback == "relaunch_without_spec" else "")
        )
        self._notify()
        if fallback == "relaunch_without_spec":
            self._request_relaunch_without_spec()

    def _request_relaunch_without_spec(self) -> None:
        if self._relaunch_requested:
            return
        self._relaunch_requested = True
        self._requests.put_nowait(("relaunch_without_spec", self.policy.stop_grace))
        self._notify()

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

    def _apply_spec_fallback(self) -> None:
        from orchestrator.launch import with_argv_overrides

        self.spec = with_argv_overrides(self.spec, spec_off=True)
        self._degraded = True
        self.speculation = "off"
        self._window.clear()
        self._warnings["fallback"] = "relaunched without speculation (spec_fallback)"

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

    async def _kill(self, grace: float) -> None:
        if self._proc is not None:
            await process.stop_process(self._proc, grace)
        await self._finish_pump()

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


class Supervisor:
    """All instances of one ``orchestrator up``.

    Args:
        specs: the launch plan (``orchestrator.launch.plan_launch``).
        config: the validated config (timeouts, per-model speculative settings).
        log_dir: directory for ``<instance>.log`` files (appended across restarts).
        policy: timing rules; defaults suit production.

    ``changed`` is an ``asyncio.Event`` pulsed (set, then cleared) on every state change and
    notable event; ``await supervisor.changed.wait()`` wakes on the next one.
    """

    def __init__(
        self,
        specs: Iterable[InstanceSpec],
        config: Config,
        *,
        log_dir: Path,
        policy: SupervisorPolicy | None = None,
    ) -> None:
        self.config = config
        self.log_dir = Path(log_dir)
        self.policy = policy or SupervisorPolicy()
        self.changed = asyncio.Event()
        self.instances = [
            Instance(s, config, log_dir=self.log_dir, policy=self.policy, on_change=self._pulse) for s in specs
        ]

    def _pulse(self, _inst: Instance) -> None:
        self.changed.set()
        self.changed.clear()

    def for_model(self, model: str) -> list[Instance]:
        """Instances (replicas) of the model named ``model``."""
        return [i for i in self.instances if i.spec.model == model]

    def pick(self, model: str) -> Instance | None:
        """The serving replica of ``model`` with the fewest requests in flight, or None."""
        serving = [i for i in self.for_model(model) if i.state in SERVING]
        if not serving:
            return None
        return min(serving, key=lambda i: (i.in_flight, i.requests))

    async def wait_for_replica(self, model: str, timeout: float) -> Instance | None:
        """Hold until a replica of ``model`` serves (S01 hold mode), at most ``timeout`` s.

        Returns None on timeout, or at once when no replica can become ready (all FAILED or
        STOPPED, or the model is unknown).
        """
        deadline = time.monotonic() + timeout
        while True:
            inst = self.pick(model)
            if inst is not None:
                return inst
            if all(i.state in TERMINAL for i in self.for_model(model)):
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.changed.wait(), timeout=left)

    async def start(self) -> None:
        """Launch every instance and return at once; readiness is tracked in the background."""
        for inst in self.instances:
            inst.start()

    async def wait_all_ready(self, timeout: float) -> bool:
        """Wait until every instance serves (True), or until one cannot or ``timeout`` s pass (False)."""
        deadline = time.monotonic() + timeout
        while True:
            states = [i.state for i in self.instances]
            if all(s in SERVING for s in states):
                return True
            if any(s in TERMINAL for s in states):
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.changed.wait(), timeout=left)

    async def stop(self, grace: float) -> None:
        """Stop all children: SIGTERM each process group, SIGKILL after ``grace`` s; reap all."""
        await asyncio.gather(*(i.stop(grace) for i in self.instances))

    def kill_now(self) -> None:
        """SIGKILL every child group at once (synchronous; for exit paths that cannot await)."""
        for inst in self.instances:
            inst.kill_now()

    def snapshot(self) -> list[dict[str, Any]]:
        """One JSON-serialisable row per instance (see ``Instance.snapshot``)."""
        return [i.snapshot() for i in self.instances]


def describe_exit(code: int | None) -> str:
    """``-9`` -> ``"killed by signal 9 (SIGKILL)"``; ``1`` -> ``"exited with code 1"`` (Popen's convention)."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-code} ({name})"
    return f"exited with code {code}"
