"""The RPC workers of one llama-server (models.yaml ``rpc:``): wait for them before each launch,
notice while serving that one went away.

- **Before a launch** every worker must answer our HELLO (``orchestrator.native.rpc.probe``) with
  the protocol of our build. One that does not answer (not started yet, its machine down, or
  busy with another client) keeps the model waiting, *degraded* with that reason, probed again
  every ``poll`` seconds; requests meanwhile get a 503 with the reason at once (or go to a
  spillover peer) instead of waiting for a worker that may never come. A worker speaking another
  protocol is refused: the instance ends FAILED with the message (waiting cannot fix it).
- **While serving** a worker cannot be probed (it serves one client at a time, with a listen
  backlog of one) and must not be: a connect attempt would sit in its backlog. Instead the
  llama-server's own connection to it is read from the kernel (``host.process.connection_states``):
  when the worker dies its end closes (``CLOSE_WAIT`` on ours) or the connection disappears, and
  the lifecycle stops llama-server and goes back to waiting (``Outcome.WORKER_LOST``). A worker
  llama-server holds no connection to (none seen, none left) has no client to disturb: its port is
  tried every ``UNSEEN_CHECK_S`` s, and one that refuses connections is lost too.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable

from orchestrator.host import process
from orchestrator.native import rpc
from orchestrator.supervise.lifecycle import Lifecycle
from orchestrator.supervise.states import Outcome, PhaseEnd, ProcessState

# Seconds one HELLO probe may take (an idle worker answers in milliseconds).
PROBE_TIMEOUT = 3.0
# Seconds between connect tries to a worker llama-server holds no connection to while serving.
UNSEEN_CHECK_S = 5.0


class WorkerGate:
    """The workers ``endpoints`` (``host:port``) of one instance.

    Read freely: ``degraded`` (why the instance waits for a worker, None when all answered),
    ``infos`` (devices and free memory each worker reported at its last probe).

    Args:
        endpoints: the ``--rpc`` workers.
        protocol: our build's RPC protocol (None: not checked).
        poll: seconds between probes while waiting.
    """

    def __init__(self, endpoints: tuple[str, ...], protocol: str | None, poll: float = 1.0) -> None:
        self.endpoints = endpoints
        self.protocol = protocol
        self.poll = poll
        self.degraded: str | None = None
        self.infos: dict[str, rpc.RpcWorkerInfo] = {}
        self._addresses: dict[str, set[tuple[str, int]]] = {}
        self._connected: set[str] = set()  # workers this launch's llama-server was seen connected to
        self._unseen: list[str] = []  # workers it holds no connection to and was never seen on (last tick)
        self._unseen_checked = 0.0  # monotonic time of the last connect try to them

    async def check(self) -> tuple[str | None, bool]:
        """Probe every worker: ``(None, False)`` when all answer with our protocol, else
        ``(why, fatal)``; ``fatal`` for a protocol mismatch."""
        for endpoint in self.endpoints:
            try:
                info = await rpc.probe(endpoint, PROBE_TIMEOUT, self.protocol)
            except rpc.RpcError as err:
                return str(err), False
            self.infos[endpoint] = info
            problem = rpc.protocol_problem(info, self.protocol)
            if problem is not None:
                return problem, True
        return None, False

    async def wait_ready(
        self,
        next_event: Callable[[float], Awaitable[PhaseEnd | None]],
        on_waiting: Callable[[str], None],
    ) -> PhaseEnd | None:
        """Return None once every worker answers; ``PhaseEnd(MISMATCH)`` for a worker of another
        build; the request when one arrives meanwhile (``STOP``). ``on_waiting`` is told each new
        reason for waiting."""
        while True:
            problem, fatal = await self.check()
            if problem is None:
                self.degraded = None
                return None
            if fatal:
                self.degraded = problem
                return PhaseEnd(Outcome.MISMATCH, problem)
            if problem != self.degraded:
                self.degraded = problem
                on_waiting(problem)
            event = await next_event(self.poll)
            if event is not None and event.outcome is Outcome.STOP:
                return event

    async def before_launch(
        self, lifecycle: Lifecycle, next_event: Callable[[asyncio.Task[int] | None, float], Awaitable[PhaseEnd | None]]
    ) -> bool:
        """Called by the instance's lifecycle task before each launch: wait until every worker
        answers (RESTARTING, *degraded* with the reason, meanwhile). False when the lifecycle is
        over: stopped meanwhile (STOPPED), or a worker of another build (FAILED with the refusal)."""

        self._connected.clear()  # a new launch

        def waiting(why: str) -> None:
            lifecycle.transition(ProcessState.RESTARTING, f"degraded, waiting for its RPC worker: {why}")

        end = await self.wait_ready(lambda timeout: next_event(None, timeout), waiting)
        if end is None:
            return True
        if end.outcome is Outcome.STOP:
            lifecycle.transition(ProcessState.STOPPED, "stopped")
        else:
            lifecycle.transition(ProcessState.FAILED, end.detail)
        return False

    def watching(
        self, next_event: Callable[[float], Awaitable[PhaseEnd | None]], lifecycle: Lifecycle
    ) -> Callable[[float], Awaitable[PhaseEnd | None]]:
        """``next_event`` for the serving watch, which also ends it with ``Outcome.WORKER_LOST``
        (the instance RESTARTING, degraded with the reason, at once) when a worker is gone."""

        async def next_or_lost(timeout: float) -> PhaseEnd | None:
            event = await next_event(timeout)
            lost = self.lost(lifecycle.pid) if event is None and lifecycle.pid else None
            if lost is None and event is None and self._unseen:
                lost = await self._refusing()
            if lost is None:
                return event
            lifecycle.transition(ProcessState.RESTARTING, f"degraded: {lost}")
            return PhaseEnd(Outcome.WORKER_LOST, lost)

        return next_or_lost

    def lost(self, pid: int) -> str | None:
        """Why a worker of the llama-server ``pid`` is gone, or None while all its connections live.

        A connection in ``CLOSE_WAIT`` means the worker closed it (llama-server never closes
        a worker it holds layers on without closing its own end), so it is lost even if no earlier
        tick saw it ``ESTABLISHED``: a worker that dies before the first tick of the watch would
        otherwise go unnoticed until llama-server next uses it. A connection that is simply gone
        counts only for a worker the server was seen connected to: one it holds nothing on
        (no layers went there) may be disconnected by llama-server itself after the load.
        """
        states = process.connection_states(pid)
        self._unseen = []
        for endpoint in self.endpoints:
            mine = [state for ip, port, state in states if (ip, port) in self._resolve(endpoint)]
            if "ESTABLISHED" in mine:
                self._connected.add(endpoint)
            elif "CLOSE_WAIT" in mine or endpoint in self._connected:
                how = "it closed its connection to" if mine else "there is no connection any more from"
                self.degraded = f"RPC worker {endpoint} lost: {how} llama-server"
                return self.degraded
            elif not mine:
                self._unseen.append(endpoint)
        return None

    async def _refusing(self) -> str | None:
        """Why a worker llama-server holds no connection to is lost (its port refuses connections),
        or None; tried at most every ``UNSEEN_CHECK_S`` s. With no client on it, a connect that is
        closed at once disturbs nothing. A connect that times out proves nothing and is let be."""
        now = time.monotonic()
        if now - self._unseen_checked < UNSEEN_CHECK_S:
            return None
        self._unseen_checked = now
        for endpoint in self._unseen:
            host, port = rpc.split_endpoint(endpoint)
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), PROBE_TIMEOUT)
            except TimeoutError:
                continue
            except OSError as err:
                self.degraded = f"RPC worker {endpoint} lost: it accepts no connections ({err.strerror or err})"
                return self.degraded
            writer.close()
        return None

    def _resolve(self, endpoint: str) -> set[tuple[str, int]]:
        found = self._addresses.get(endpoint)
        if found is None:
            host, port = rpc.split_endpoint(endpoint)
            try:
                infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
                found = {(str(info[4][0]), port) for info in infos}
            except OSError:
                found = {(host, port)}
            self._addresses[endpoint] = found
        return found

    def snapshot(self) -> dict[str, object]:
        """``{"workers": [{endpoint, protocol, devices: [{free, total} bytes]}], "degraded": why|None}``."""
        return {
            "workers": [
                {
                    "endpoint": ep,
                    "protocol": self.infos[ep].protocol if ep in self.infos else None,
                    "devices": [{"free": d.free, "total": d.total} for d in self.infos[ep].devices]
                    if ep in self.infos
                    else [],
                }
                for ep in self.endpoints
            ],
            "degraded": self.degraded,
        }
