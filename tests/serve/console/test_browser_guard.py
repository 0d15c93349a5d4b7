"""A keyless endpoint on loopback answers local clients, not other sites' web pages.

Through the real proxy and llama-server: a DNS-rebinding page (its own name as ``Host``) and a
cross-site page (``Origin`` of another site, e.g. a ``text/plain`` POST that needs no preflight)
are refused with a 403 in each API's shape; plain clients, loopback origins, IP literals and
``server.cors_origins`` pass. With API keys set, the keys decide (the guard is off).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import Stack, real_stack

pytestmark = [pytest.mark.native, pytest.mark.slow]

MODELS = [{"name": "demo", "parallel": 1, "ctx_size": 1024, "thinking": False, "threads": 1}]
CHAT = {"model": "demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    server = {"cors_origins": ["https://chat.example.com"]}
    s = real_stack(tmp_path_factory.mktemp("guard"), echo_model, bin_info, server=server, models=MODELS)
    yield s
    s.close()


def post(stack: Stack, path: str, headers: dict[str, str], body: Any = CHAT) -> httpx.Response:
    return httpx.post(stack.url + path, headers=headers, content=json.dumps(body), timeout=60)


@pytest.mark.parametrize(
    "headers",
    [
        {"host": "attacker.example"},  # DNS rebinding: the page's own name, same-origin to the browser
        {"host": "attacker.example", "origin": "http://attacker.example"},
        {"origin": "http://attacker.example", "content-type": "text/plain"},  # cross-site, no preflight
        {"origin": "null", "content-type": "text/plain"},  # sandboxed frame or file:// page
    ],
)
def test_pages_of_other_sites_are_refused_in_each_apis_shape(stack: Stack, headers: dict[str, str]) -> None:
    chat = post(stack, "/v1/chat/completions", headers)
    assert chat.status_code == 403 and chat.json()["error"]["code"] == "foreign_origin", chat.text
    msg = post(stack, "/v1/messages", headers, {**CHAT, "messages": [{"role": "user", "content": "hi"}]})
    assert msg.status_code == 403 and msg.json()["type"] == "error", msg.text
    ollama = post(stack, "/api/chat", headers, {**CHAT, "stream": False})
    assert ollama.status_code == 403 and "no API keys" in ollama.json()["error"], ollama.text
    restart = post(stack, "/models/restart", {**headers, "content-type": "application/json"}, {"model": "demo"})
    assert restart.status_code == 403, restart.text
    status = httpx.get(stack.url + "/status", headers=headers, timeout=30)
    assert status.status_code == 403, status.text


@pytest.mark.parametrize(
    "headers",
    [
        {},  # a plain client: no Origin, Host 127.0.0.1:PORT
        {"host": "localhost"},
        {"host": "[::1]:1"},  # an IP literal cannot be rebound
        {"origin": "http://localhost:3000"},  # a web UI on this machine
        {"origin": "https://chat.example.com"},  # listed in server.cors_origins
    ],
)
def test_local_clients_and_listed_origins_pass(stack: Stack, headers: dict[str, str]) -> None:
    r = post(stack, "/v1/chat/completions", {"content-type": "application/json", **headers})
    assert r.status_code == 200, r.text


def test_with_keys_the_keys_decide(tmp_path: Path, bin_info: Any, echo_model: Path) -> None:
    s = real_stack(tmp_path, echo_model, bin_info, server={"api_keys": ["K"]}, models=MODELS)
    try:
        headers = {"host": "gpu-box.lan", "origin": "http://attacker.example", "authorization": "Bearer K"}
        assert post(s, "/v1/chat/completions", headers).status_code == 200
        assert post(s, "/v1/chat/completions", {"host": "gpu-box.lan"}).status_code == 401
    finally:
        s.close()
