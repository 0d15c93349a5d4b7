"""The real Codex CLI reads the catalog entry the endpoint serves (``orchestrator.connect.catalog``):
given it as ``model_catalog_json``, Codex parses it, drops its "Model metadata ... not found"
fallback, and sends its request with the entry's settings (reasoning effort, instructions).

A capturing HTTP server stands in for the endpoint: the test is about what Codex accepts, and the
request never needs an answer (it gets a 400 and Codex stops)."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from orchestrator.connect.catalog import INSTRUCTIONS, codex_entry
from tests.agent_clients import client_env

pytestmark = [pytest.mark.agents, pytest.mark.slow]


@pytest.fixture
def capture() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    bodies: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
            self.send_response(400)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "captured", "type": "invalid_request_error"}}')

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", bodies
    server.shutdown()
    thread.join()


def test_codex_accepts_the_served_catalog_entry(
    agent_clients: Any, capture: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    url, bodies = capture
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    catalog = home / "catalog.json"
    catalog.write_text(json.dumps({"models": [codex_entry("demo", 32768, thinking=True, images=False)]}))
    (home / ".codex" / "config.toml").write_text(
        f'model = "demo"\nmodel_provider = "o"\nmodel_catalog_json = "{catalog}"\n'
        f'[model_providers.o]\nname = "o"\nbase_url = "{url}"\nwire_api = "responses"\n'
    )
    proc = subprocess.run(
        [str(agent_clients.codex), "exec", "--skip-git-repo-check", "say hi"],
        env=client_env(home),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert "failed to parse model_catalog_json" not in out, out[-2000:]
    assert "Model metadata for `demo` not found" not in out, out[-2000:]
    assert bodies, out[-2000:]
    assert bodies[0]["reasoning"]["effort"] == "medium"  # the entry's default level
    assert bodies[0]["input"][0]["content"][0]["text"] == INSTRUCTIONS
