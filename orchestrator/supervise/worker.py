"""``orchestrator worker``: run and supervise one ``ggml-rpc-server`` (llama.cpp's RPC worker).

Same rules as a llama-server instance: the child runs in its own process group with a
parent-death signal (``orchestrator.host.process``), so it never outlives us; its output goes
to a log file (``ChildLog``, appended across launches); an exit is a crash: restarted after a
backoff that doubles per recent crash, FAILED on a crash loop (``Lifecycle.crashed`` with the
``SupervisorPolicy``). Ready means the worker answered our HELLO (``orchestrator.native.rpc``)
with the protocol of our build; another protocol is FAILED at once (a restart cannot help).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.host import ports
from orchestrator.native import rpc
from orchestrator.supervise.child_io import ChildLog, ChildProcess
from orchestrator.supervise.lifecycle import Lifecycle, describe_exit
from orchestrator.supervise.readiness import failure_lines
from orchestrator.supervise.states import ProcessState, SupervisorPolicy

# Seconds one HELLO probe may take while the worker starts (it answers in milliseconds when idle).
PROBE_TIMEOUT = 2.0


@dataclass
class WorkerOptions:
    """How to run the worker.

    Attributes:
        binary: the ``ggml-rpc-server`` executable.
        host: address to bind (``127.0.0.1`` unless the person chose otherwise).
        port: TCP port; 0 = a free port picked for the first launch (ggml-rpc-server cannot bind
            port 0 itself), picked again while launches fail before answering, then kept.
        devices: ggml device names (``CUDA0``, ``CPU``); empty = the worker's default (all).
        threads: CPU threads of the worker, None = its default.
        protocol: our build's RPC protocol (``manifest.json`` ``rpc_protocol``); a worker speaking
            another is refused.
        env: extra environment (the build's runtime library folders).
        ready_timeout: seconds a launch may take to answer HELLO.
    """

    binary: Path
    host: str = "127.0.0.1"
    port: int = 50052
    devices: list[str] = field(default_factory=list)
    threads: int | None = None
    protocol: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    ready_timeout: float = 60.0

    def argv(self, port: int) -> tuple[str, ...]:
        """The ggml-rpc-server command line on ``port`` (``tools/rpc/rpc-server.cpp`` options)."""
        args = [str(self.binary), "--host", self.host, "--port", str(port)]
        if self.devices:
            args += ["--device", ",".join(self.devices)]
        if self.threads is not None:
            args += ["--threads", str(self.threads)]
        return tuple(args)


class RpcWorker:
    """One supervised ggml-rpc-server.

    Read freely: ``state``/``message`` (``lifecycle``), ``endpoint`` (``host:port`` once
    known), ``info`` (devices and free memory from the last ready probe), ``pid``.

    Args:
        options: what to run.
        log_path: the worker's log file (appended across launches).
        policy: restart and backoff rules.
        on_change: called on every state change (the command line prints from it).
    """

    def __init__(
        self,
        options: WorkerOptions,
        log_path: Path,
        policy: SupervisorPolicy | None = None,
        on_change: Callable[[RpcWorker], None] | None = None,
    ) -> None:
        self.options = options
        self.policy = policy or SupervisorPolicy()
        self.lifecycle = Lifecycle(self._notify, self.policy.load_failure_limit)
        self.log = ChildLog(log_path, self.policy.tail_lines, lambda line: None)
        self.child = ChildProcess()
        self.endpoint: str | None = None
        self.info: rpc.RpcWorkerInfo | None = None
        self._on_change = on_change
        self._stop = asyncio.Event()
        self._port = options.port  # the port of this launch (options.port 0: picked)
        self._ever_ready = False

    @property
    def state(self) -> ProcessState:
        """The lifecycle state (LOADING until HELLO answers, READY, RESTARTING, FAILED, STOPPED)."""
        return self.lifecycle.state

    @property
    def message(self) -> str | None:
        """Why it is RESTARTING or FAILED."""
        return self.lifecycle.message

    @property
    def pid(self) -> int | None:
        """The current child's pid."""
        return self.lifecycle.pid

    def _notify(self) -> None:
        if self._on_change is not None:
            self._on_change(self)

    def stop(self) -> None:
        """Ask ``run`` to stop the child and return (safe from a signal handler)."""
        self._stop.set()

    async def run(self) -> int:
        """Run until ``stop()`` (0) or until the worker cannot be kept running (FAILED: 1)."""
        try:
            while not self._stop.is_set():
                self.lifecycle.transition(ProcessState.LOADING, "starting ggml-rpc-server")
                outcome = await self._one_launch()
                if outcome is not None:
                    return outcome
        finally:
            await self.child.stop(self.policy.stop_grace)
            await self.log.finish_pump(self.policy.exit_drain)
            self.log.close()
        self.lifecycle.transition(ProcessState.STOPPED, "stopped")
        return 0

    async def _one_launch(self) -> int | None:
        """Spawn, wait ready, wait for the exit; None to launch again, else the exit status of ``run``."""
        self.log.begin_launch(f"===== orchestrator: worker launch at {time.strftime('%Y-%m-%d %H:%M:%S')}")
        self.lifecycle.launching()
        if self.options.port == 0 and not self._ever_ready:
            self._port = ports.pick_free_port(self.options.host)
        try:
            proc = await self.child.spawn(self.options.argv(self._port), dict(self.options.env))
        except OSError as err:
            self.lifecycle.transition(ProcessState.FAILED, f"cannot start {self.options.binary}: {err}")
            return 1
        self.log.start_pump(proc)
        self.lifecycle.launched(proc.pid)
        problem = await self._wait_ready()
        if problem is not None:
            await self.child.stop(0.0)
            self.lifecycle.transition(ProcessState.FAILED, problem)
            return 1
        if self.child.running:
            self._ever_ready = True
            self.lifecycle.transition(ProcessState.READY, None)
            await self._wait_exit_or_stop()
        if self._stop.is_set():
            return None
        return await self._after_crash()

    async def _wait_ready(self) -> str | None:
        """Probe until the worker answers; the refusal when it cannot serve, None when ready or exited."""
        deadline = time.monotonic() + self.options.ready_timeout
        connect_host = "127.0.0.1" if self.options.host in ("0.0.0.0", "") else self.options.host
        self.endpoint = f"{connect_host}:{self._port}"
        while self.child.running and not self._stop.is_set():
            try:
                self.info = await rpc.probe(self.endpoint, PROBE_TIMEOUT, self.options.protocol)
            except rpc.RpcError:
                pass
            else:
                return rpc.protocol_problem(self.info, self.options.protocol)
            if time.monotonic() > deadline:
                return f"ggml-rpc-server did not answer within {self.options.ready_timeout:g} s"
            await asyncio.sleep(self.policy.poll_interval)
        return None

    async def _wait_exit_or_stop(self) -> None:
        exited = self.child.exited
        assert exited is not None
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({exited, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()

    async def _after_crash(self) -> int | None:
        await self.log.finish_pump(self.policy.exit_drain)
        verdict = self.lifecycle.crashed(self.child.returncode, self.policy)
        why = describe_exit(self.child.returncode)
        cause = failure_lines(self.log.run_tail(), 3)
        log = f"; log: {' | '.join(cause)}" if cause else ""
        if verdict.crash_loop or verdict.load_limit:
            window = self.policy.crash_loop_window
            what = (
                f"crash loop: {verdict.recent} exits within {window:g} s"
                if verdict.crash_loop
                else f"{verdict.load_failures} launches in a row exited before answering"
            )
            self.lifecycle.transition(ProcessState.FAILED, f"{what}; last {why}{log}")
            return 1
        self.lifecycle.restarts += 1
        self.lifecycle.transition(ProcessState.RESTARTING, f"{why}; restarting in {verdict.delay:g} s{log}")
        try:
            await asyncio.wait_for(self._stop.wait(), timeout=verdict.delay)
        except TimeoutError:
            return None
        return None
