"""WorkerGate.lost: which connection states of llama-server mean an RPC worker is gone."""

from __future__ import annotations

import asyncio
import socket

import pytest

from orchestrator.host import process
from orchestrator.supervise.lifecycle import Lifecycle
from orchestrator.supervise.rpc_workers import WorkerGate
from orchestrator.supervise.states import Outcome, ProcessState

ENDPOINT = "127.0.0.1:50052"


def _states(monkeypatch: pytest.MonkeyPatch, *states: str) -> None:
    monkeypatch.setattr(process, "connection_states", lambda pid: [("127.0.0.1", 50052, s) for s in states])


def test_a_worker_that_closed_before_any_tick_saw_it_connected_is_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = WorkerGate((ENDPOINT,), None)
    _states(monkeypatch, "CLOSE_WAIT")  # the worker died before the watch's first tick
    why = gate.lost(1234)
    assert why is not None and ENDPOINT in why and "closed its connection" in why
    assert gate.degraded == why


def test_a_connection_never_seen_is_not_a_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = WorkerGate((ENDPOINT,), None)
    _states(monkeypatch)  # llama-server may drop a worker it put no layers on
    assert gate.lost(1234) is None and gate.degraded is None


def test_a_connection_seen_then_gone_is_a_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = WorkerGate((ENDPOINT,), None)
    _states(monkeypatch, "ESTABLISHED")
    assert gate.lost(1234) is None
    _states(monkeypatch)
    why = gate.lost(1234)
    assert why is not None and "no connection any more" in why


def test_a_worker_never_seen_whose_port_refuses_is_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """llama-server holds no connection to the worker (none seen, none left, as when the worker's
    end reset it before a tick saw it): its port is tried, and a refusal is a loss; a worker that
    accepts is not."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        endpoint = f"127.0.0.1:{port}"
        monkeypatch.setattr(process, "connection_states", lambda pid: [])
        gate = WorkerGate((endpoint,), None)
        lifecycle = Lifecycle(lambda: None)
        lifecycle.pid = 1234

        async def tick() -> object:
            async def no_event(timeout: float) -> None:
                return None

            gate._unseen_checked = 0.0  # the next tick tries the port
            return await gate.watching(no_event, lifecycle)(0.0)

        listener.listen()
        assert asyncio.run(tick()) is None and gate.degraded is None  # it accepts: not lost
    end = asyncio.run(tick())  # the port is closed now
    assert getattr(end, "outcome", None) is Outcome.WORKER_LOST
    assert gate.degraded is not None and "accepts no connections" in gate.degraded
    assert lifecycle.state is ProcessState.RESTARTING
