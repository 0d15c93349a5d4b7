"""The clients that talk to llama-server children build no verifying SSL context.

The children speak plain HTTP on loopback. httpx's default (``verify=True``) loads the CA bundle
into a new SSL context for every client, about 40 ms of CPU on the event loop; an idle save of 8
slots made 9 such clients and froze every running stream for a third of a second (found with
py-spy under load). These tests fail if a client ever loads CA certificates again.
"""

from __future__ import annotations

import asyncio
import ssl

import httpx
import pytest

from orchestrator.supervise.child_io import ChildProbe
from orchestrator.supervise.slot_client import SlotClient


@pytest.fixture
def no_ca_loading(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every attempt to load CA certificates (what ``verify=True`` does)."""
    loads: list[str] = []

    def record(self: ssl.SSLContext, *args: object, **kwargs: object) -> None:
        loads.append(repr(args or kwargs))

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", record)
    monkeypatch.setattr(ssl.SSLContext, "load_default_certs", lambda self, *a: loads.append("default"))
    return loads


def test_a_slot_client_loads_no_ca_bundle(no_ca_loading: list[str]) -> None:
    asyncio.run(SlotClient().for_child(None)._client().aclose())
    assert no_ca_loading == []


def test_a_child_probe_loads_no_ca_bundle(no_ca_loading: list[str]) -> None:
    asyncio.run(ChildProbe(timeout=1.0).aclose())
    assert no_ca_loading == []


def test_the_guard_sees_a_default_httpx_client(no_ca_loading: list[str]) -> None:
    """The check above can fail: a default client does load the bundle."""
    asyncio.run(httpx.AsyncClient().aclose())
    assert no_ca_loading != []
