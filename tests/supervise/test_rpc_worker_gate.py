"""WorkerGate.lost: which connection states of llama-server mean an RPC worker is gone."""

from __future__ import annotations

import pytest

from orchestrator.host import process
from orchestrator.supervise.rpc_workers import WorkerGate

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
