"""One supervised llama-server (``Instance``): start, wait ready, verify, watch, restart, stop.

Each ``Instance`` has exactly one writer of its state: its lifecycle task, a loop
``spawn -> wait ready -> verify -> watch -> on exit decide restart / backoff / failed`` (after
llama-swap's ``process.go``) that changes state only through ``Lifecycle.transition``. Others (proxy,
``up``, bench) only read fields, bump counters, or queue requests to it (stop, relaunch without spec).

Readiness follows the child (after Ollama ``llm/llama_server.go``): ``/health`` is polled every
``SupervisorPolicy.poll_interval`` seconds, the child's liveness on every poll; the load deadline
(``server.timeouts.load``) counts from the child's last log line (up to ``load_cap_factor`` x).

``Instance`` delegates to: ``Lifecycle`` (state, counters) and its ``Inbox`` (requests to the loop),
``ChildProcess`` (spawn, exit, stop), ``ChildLog`` (log file, tails, pump), ``ChildProbe`` (``/health``,
``/props``, port; one per run), ``SpecWatch`` (drafting, acceptance), ``WorkerGate`` (RPC workers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.launch.spec import without_speculation
from orchestrator.supervise.calls import Calls
from orchestrator.supervise.child_auth import ChildLock
from orchestrator.supervise.child_io import ChildLog, ChildProbe, ChildProcess
from orchestrator.supervise.effective import effective_settings
from orchestrator.supervise.lifecycle import Inbox, Lifecycle, describe_exit
from orchestrator.supervise.parts import Part
from orchestrator.supervise.progress import NoProgress
from orchestrator.supervise.readiness import (
    Health,
    OffloadWatch,
    failure_lines,
    is_spec_batch_failure,
    parse_listening_port,
)
from orchestrator.supervise.responsiveness import Responsiveness, watch
from orchestrator.supervise.rpc_workers import WorkerGate
from orchestrator.supervise.spec_watch import Speculation, SpecWatch
from orchestrator.supervise.states import Outcome, PhaseEnd, ProcessState, SupervisorPolicy

if TYPE_CHECKING:
    from orchestrator.config.schema import Config
    from orchestrator.launch.spec import InstanceSpec

log = logging.getLogger("orchestrator.supervise")


# the load log kept for ``effective_settings``: llama-server's load prints a few hundred lines
_LOAD_LOG_LINES = 5000


class Instance:
    """One supervised llama-server (one replica of one model).

    Read freely: ``spec``, ``state``, ``base_url``, ``pid`` (the current or last child), ``restarts``,
    ``exit_code``, ``started_at``/``ready_at`` (Unix time, seconds), ``requests``, ``speculation``,
    ``warnings``, ``stalls``, ``responsive``, ``message`` (why it FAILED or is RESTARTING),
    ``decode_tps`` (tok/s of the last response), ``acceptance`` (accepted / drafted so far). The
    proxy's leases (``orchestrator.supervise.managed.Lease``; the bench's requests without a
    scheduler) increment and decrement ``in_flight`` around each request (each increment
    also counts one request in ``requests``).

    Args:
        spec: what to launch.
        config: the validated config (``server.timeouts.load``, the model's speculative settings).
        log_dir: directory of ``<instance>.log``.
        policy: timing rules.
        on_change: called with the instance on every state change and notable event.
    """

    def __init__(
        self,
        spec: InstanceSpec,
        config: Config,
        *,
        log_dir: Path,
        policy: SupervisorPolicy,
        on_change: Callable[[Instance], None] | None = None,
    ) -> None:
        self.spec = spec
        self.policy = policy
        self.base_url: str | None = None
        self.requests = 0
        self.stalls = 0  # stalls detected (each killed and restarted the child)
        self._in_flight = 0
        self._on_change = on_change
        self._warnings: dict[str, str] = {}
        self._load_timeout = float(config.server.timeouts.load)
        self.lock = ChildLock(config)  # with server.api_keys, a key per launch (supervise/child_auth.py)
        self.child_key = self.lock.current  # for the proxy's upstream: the running launch's key
        self.lifecycle = Lifecycle(self._notify, policy.load_failure_limit)
        self.log = ChildLog(log_dir / f"{spec.name}.log", policy.tail_lines, self._on_line)
        self.spec_watch = SpecWatch(
            speculative=spec.spec_type is not None,
            model_cfg=next((m for m in config.models if m.name == spec.model), None),
            policy=policy,
            warnings=self._warnings,
            notify=self._notify,
            request_relaunch=self._request_relaunch_without_spec,
        )
        self._launches = 0
        self._degraded = False
        self._relaunch_requested = False
        self.child = ChildProcess()
        self._inbox = Inbox()
        self._task: asyncio.Task[None] | None = None
        self._probe: ChildProbe | None = None
        self.offload = OffloadWatch()  # a GPU instance must really be on the GPU
        # what llama-server reports it runs with (supervise/effective.py), read from each launch's load log
        self.effective: dict[str, str] = {}
        self._load_log: list[str] | None = None
        self._responsiveness = Responsiveness(self._warnings, self._notify)  # marked by the watch only
        self.calls = Calls()  # the proxy's requests in flight here, as /slots names them
        self.no_progress = NoProgress(self.calls, float(config.server.timeouts.no_progress), self._on_no_progress)
        self.workers = WorkerGate(spec.rpc, spec.rpc_protocol) if spec.rpc else None  # models.yaml rpc:

    # ----------------------------------------------------------------- readers

    @property
    def name(self) -> str:
        """The instance name, e.g. ``demo-0``."""
        return self.spec.name

    state = Part[ProcessState]("lifecycle")  # written only by the lifecycle loop
    message = Part["str | None"]("lifecycle")  # why it FAILED or is RESTARTING
    pid = Part["int | None"]("lifecycle")  # the current or last child's pid
    exit_code = Part["int | None"]("lifecycle")  # negative: killed by that signal
    restarts = Part[int]("lifecycle")  # after crashes (a fallback relaunch is not one)
    started_at = Part["float | None"]("lifecycle")  # Unix time (s) of the last spawn
    ready_at = Part["float | None"]("lifecycle")  # Unix time (s) it last started serving
    speculation = Part[Speculation]("spec_watch")  # off, unknown (not judged yet), active, inactive
    decode_tps = Part["float | None"]("spec_watch")  # decode tok/s of the last response
    drafted = Part[int]("spec_watch")  # draft tokens since launch
    accepted = Part[int]("spec_watch")  # accepted draft tokens since launch
    acceptance = Part["float | None"]("spec_watch")  # accepted / drafted since launch, None before
    rolling_acceptance = Part["tuple[float | None, int]"]("spec_watch")  # over the last acceptance_window

    @property
    def responsive(self) -> bool:
        """False while a serving child has answered nothing for ``unresponsive_after`` s (a stall
        is suspected and a restart pending); such a replica gets no new request."""
        return self._responsiveness.responsive

    @property
    def log_path(self) -> Path:
        """The instance's log file (all launches)."""
        return self.log.path

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

    def log_tail(self, n: int = 50) -> list[str]:
        """The last ``n`` lines the child wrote (stdout and stderr, all launches)."""
        return self.log.tail(n)

    # ----------------------------------------------------------------- inputs from the proxy / bench

    def record_timings(self, timings: dict[str, Any]) -> None:
        """Account one response's llama-server ``timings`` (``SpecWatch``; an answer for ``responsiveness.watch``)."""
        self._responsiveness.result_at = time.monotonic()
        self.spec_watch.record_timings(timings)

    def record_error(self, kind: str, text: str) -> None:
        """Account an error seen by the proxy or in the child's log.

        Args:
            kind: ``"spec_batch"`` for llama-server's "failed to process speculative batch" (see
                ``SpecWatch.record_spec_batch_failure``); any other kind is kept as the latest
                warning of that kind.
            text: the error text (one line).
        """
        if kind == "spec_batch":
            self.spec_watch.record_spec_batch_failure(text)
            return
        self._warnings[f"error:{kind}"] = f"{kind}: {text.strip()[:300]}"
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
            self.lifecycle.forget_crashes()
        self._inbox.reset()
        # STOPPED/FAILED -> LOADING here: no lifecycle task exists yet (so this is still the only
        # writer), and waiters must not see STOPPED after start()
        self.lifecycle.transition(ProcessState.LOADING, "starting")
        self._task = asyncio.get_running_loop().create_task(self._lifecycle(), name=f"supervise {self.name}")

    async def stop(self, grace: float) -> None:
        """Stop the child (SIGTERM its group, SIGKILL after ``grace`` s) and end the lifecycle.

        Returns once the child is reaped; the state is then STOPPED (or stays FAILED).
        """
        task = self._task
        if task is None or task.done():
            return
        self._inbox.put(PhaseEnd(Outcome.STOP, grace=grace))
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=grace + 10.0)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def kill_now(self) -> None:
        """SIGKILL the child's group immediately (synchronous last resort, e.g. at exit)."""
        self.child.kill_now()

    def _request_relaunch_without_spec(self) -> None:
        if self._relaunch_requested:
            return
        self._relaunch_requested = True
        self._inbox.put(PhaseEnd(Outcome.RELAUNCH_WITHOUT_SPEC, grace=self.policy.stop_grace))
        self._notify()

    def _notify(self) -> None:
        if self._on_change is not None:
            self._on_change(self)

    def _on_no_progress(self, line: str) -> None:
        log.warning("%s: %s", self.name, line)
        self._warnings["no_progress"] = line
        self._notify()

    def _on_line(self, line: str) -> None:
        if self.base_url is None and (port := parse_listening_port(line)):
            self.base_url = f"http://{self.spec.host}:{port}"
        if is_spec_batch_failure(line):
            self.record_error("spec_batch", line)
        self.offload.line(line)
        if self._load_log is not None and len(self._load_log) < _LOAD_LOG_LINES:
            self._load_log.append(line)

    # ----------------------------------------------------------------- the lifecycle task

    async def _lifecycle(self) -> None:
        self._probe = ChildProbe(self.policy.health_timeout, self.lock.auth)
        try:
            await self._lifecycle_loop()
        finally:
            if self.child.running:
                # cancelled or crashed in here: never leave the child behind
                await self.child.stop(0.0)
                self.lifecycle.pid = None
            await self.log.finish_pump(self.policy.exit_drain)
            self._inbox.close()
            await self._probe.aclose()
            self.log.close()

    async def _lifecycle_loop(self) -> None:
        while True:
            if self._relaunch_requested and self.spec.spec_type is not None:
                self._apply_spec_fallback()
            if self.workers is not None and not await self.workers.before_launch(self.lifecycle, self._inbox.next):
                return
            self.lifecycle.transition(ProcessState.LOADING, "loading model")
            try:
                await self._launch()
            except OSError as err:  # cannot exec at all: retrying cannot help
                self.lifecycle.transition(ProcessState.FAILED, f"cannot start {self.spec.argv[0]}: {err}")
                return
            end = await self._wait_ready()
            if end.outcome is Outcome.READY:
                degraded = "serving without speculation (fallback)" if self._degraded else None
                self.lifecycle.transition(ProcessState.DEGRADED if self._degraded else ProcessState.READY, degraded)
                end = await self._watch()
            if not await self._after(end):
                return

    async def _after(self, end: PhaseEnd) -> bool:
        """Act on how the serving (or loading) phase ended; False when the lifecycle is over."""
        grace = end.grace if end.outcome is Outcome.STOP and end.grace is not None else self.policy.stop_grace
        if end.outcome is Outcome.STOP:
            await self._kill(grace)
            self.lifecycle.transition(ProcessState.STOPPED, "stopped")
            return False
        if end.outcome in (Outcome.RELAUNCH_WITHOUT_SPEC, Outcome.WORKER_LOST):
            await self._kill(grace)
            return True  # the loop relaunches: without the speculative flags, or once the workers answer
        if end.outcome in (Outcome.TIMEOUT, Outcome.MISMATCH, Outcome.NOT_ON_GPU):
            await self._kill(grace)
            self.lifecycle.transition(ProcessState.FAILED, end.detail)
            return False
        return await self._after_crash(end)

    async def _after_crash(self, end: PhaseEnd) -> bool:
        """An exit or a stall: kill what is left of the group (a stalled child, or anything an exited
        one forked), then restart with backoff or give up on a crash loop."""
        stalled = end.outcome is Outcome.STALLED
        if stalled:
            self._warnings["stall"] = str(end.detail)
            self.stalls += 1  # before the kill: the proxy's cut-off requests read it
        await self._kill(0.0)  # a stalled child cannot drain anything: SIGKILL at once
        verdict = self.lifecycle.crashed(self.child.returncode, self.policy)
        why = end.detail if stalled else describe_exit(self.exit_code)
        cause = failure_lines(self.log.run_tail(), 3)
        log = f"; log: {' | '.join(cause)}" if cause else ""
        if verdict.crash_loop:
            window = self.policy.crash_loop_window
            self.lifecycle.transition(
                ProcessState.FAILED,
                f"crash loop: {verdict.recent} crashes before ready within {window:g} s; last {why}{log}",
            )
            return False
        if verdict.load_limit:
            self.lifecycle.transition(
                ProcessState.FAILED, f"{self.lifecycle.load_failures.describe()}; last {why}{log}"
            )
            return False
        self.lifecycle.restarts += 1
        self._warnings["crash"] = f"last crash: {why}; restarted (restart {self.lifecycle.restarts})"
        self.lifecycle.transition(ProcessState.RESTARTING, f"{why}; restarting in {verdict.delay:g} s{log}")
        if await self._backoff(verdict.delay):
            self.lifecycle.transition(ProcessState.STOPPED, "stopped")
            return False
        return True

    def _apply_spec_fallback(self) -> None:
        """Relaunch without speculation: a new spec without the speculative flags (state DEGRADED)."""
        self.spec = without_speculation(self.spec)
        self._degraded = True
        self.spec_watch.fallback_applied()

    # ----------------------------------------------------------------- phases

    async def _launch(self) -> None:
        self._launches += 1
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        argv = " ".join(self.spec.argv)
        self.log.begin_launch(f"===== orchestrator: launch #{self._launches} of {self.name} at {stamp}: {argv}")
        env = self.lock.launch(self.spec.env)
        self.base_url = f"http://{self.spec.host}:{self.spec.port}" if self.spec.port else None
        self.lifecycle.launching()
        self.offload.reset()
        self.no_progress.launched()
        self.effective, self._load_log = {}, []
        proc = await self.child.spawn(self.spec.argv, env, (self.spec.server.slot_save_path,), self.lock.unset)
        self.log.start_pump(proc)
        self.lifecycle.launched(proc.pid)

    async def _next_event(self, timeout: float) -> PhaseEnd | None:
        """Wait up to ``timeout`` s for a request or the child's exit; None on a plain tick."""
        return await self._inbox.next(self.child.exited, timeout)

    async def _wait_ready(self) -> PhaseEnd:
        proc = self.child.proc
        assert self._probe is not None and proc is not None
        started = time.monotonic()
        while True:
            event = await self._next_event(self.policy.poll_interval)
            if event is not None:
                return event
            if self.base_url is None and (url := self._probe.discover_port(proc.pid, self.spec.host)):
                self.base_url = url
                self._notify()
            if self.base_url is not None and await self._probe.health(self.base_url) is Health.READY:
                problem = await self._probe.verify_identity(self.base_url, proc, self.spec)
                if problem:
                    return PhaseEnd(Outcome.MISMATCH, problem)
                problem, warning = self.offload.verdict(self.spec.server.gpu_layers if self.spec.gpus else None)
                if warning:
                    self._warnings["offload"] = warning
                self.effective = effective_settings("\n".join(self._load_log or ()), self._probe.last_props)
                self._load_log = None
                return PhaseEnd(Outcome.NOT_ON_GPU, problem) if problem else PhaseEnd(Outcome.READY)
            now = time.monotonic()
            quiet = now - max(started, self.log.last_output)
            if quiet > self._load_timeout or now - started > self._load_timeout * self.policy.load_cap_factor:
                tail = self.log.run_tail(10)
                return PhaseEnd(
                    Outcome.TIMEOUT,
                    f"not ready after {now - started:.0f} s (load timeout {self._load_timeout:g} s, "
                    "server.timeouts.load); "
                    + ("last log lines:\n" + "\n".join(tail) if tail else "the server wrote nothing"),
                )

    async def _watch(self) -> PhaseEnd:
        """Serve until an event or a stall (``orchestrator.supervise.responsiveness.watch``)."""
        assert self._probe is not None and self.base_url is not None
        probe, url = self._probe, self.base_url
        return await watch(
            lambda: probe.slots(url),
            self.workers.watching(self._next_event, self.lifecycle) if self.workers else self._next_event,
            self._responsiveness,
            self.policy,
            lambda: self.in_flight,
            self.no_progress.on_slots,
        )

    async def _backoff(self, delay: float) -> bool:
        """Sleep ``delay`` s unless asked to stop meanwhile (True)."""
        self.child.exited = None
        deadline = time.monotonic() + delay
        while (left := deadline - time.monotonic()) > 0:
            event = await self._next_event(left)
            if event is not None and event.outcome is Outcome.STOP:
                return True
        return False

    async def _kill(self, grace: float) -> None:
        await self.child.stop(grace)
        await self.log.finish_pump(self.policy.exit_drain)
