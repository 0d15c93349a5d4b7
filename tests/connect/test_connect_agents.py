"""The real Claude Code and Codex CLIs (pinned, ``agent_clients``) answer through ``orchestrator up``
serving the demo model with nothing but what ``orchestrator connect CLIENT --write`` wrote into
their own config files (each in its own empty home; no update checks or telemetry).

The demo model is stretched to a 64K window (``allow_ctx_beyond_trained`` adds ``--override-kv``:
its echo weights do not depend on position) so Claude Code's ~19K-token first request fits, and it
never emits an end token, so every answer ends at its length cap: ``--max-output 16`` for Claude
Code (which then reports the cap as an error after printing the answer) and the server's ``-n 24``
for Codex (it sends none).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from supervision_helpers import RunningUp

from tests.agent_clients import client_env

CLIENT_TIMEOUT = 600.0  # seconds; a 19K-token prefill of the demo takes ~25 s on 2 idle cores


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory, bin_info: Any) -> Any:
    work = tmp_path_factory.mktemp("connect-agents")
    config = work / "models.yaml"
    config.write_text(
        "server: {host: 127.0.0.1, port: 0, timeouts: {load: 120}}\n"
        "models:\n"
        "  - name: demo\n    path: builtin:tiny-mtp\n    aliases: [tiny]\n    ctx_size: 65536\n"
        "    allow_ctx_beyond_trained: true\n    threads: 2\n    thinking: false\n"
        '    extra_args: ["-n", "24"]\n'
    )
    with RunningUp(config, work / "state") as running:
        yield running


def _connect(up: Any, home: Path, *args: str) -> None:
    env = {**client_env(home), "ORCHESTRATOR_STATE": str(up.state)}
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.app", "connect", *args, "-c", str(up.config), "--write"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert str(up.run["endpoint"]) in done.stdout  # the running endpoint's real port, not models.yaml's 0


@pytest.mark.server
@pytest.mark.slow
def test_claude_code_answers_with_what_connect_wrote(up: Any, agent_clients: Any, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    _connect(up, home, "claude-code", "--max-output", "16")
    assert json.loads((home / ".claude" / "settings.json").read_text())["env"]["ANTHROPIC_MODEL"] == "demo"
    done = subprocess.run(
        [str(agent_clients.claude), "-p", "Say hello", "--output-format", "stream-json", "--verbose"],
        cwd=home,
        env=client_env(home),  # no ANTHROPIC_* variables: only the settings file says where to go
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT,
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    texts = [
        part.get("text", "")
        for e in events
        if e.get("type") == "assistant"
        for part in e["message"]["content"]
        if part.get("type") == "text"
    ]
    assert "".join(texts).strip(), f"no answer from the endpoint:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    result = next(e for e in events if e.get("type") == "result")
    # the only complaint may be the output cap the demo always reaches (it has no end token)
    assert not result.get("is_error") or "output token maximum" in str(result.get("result")), result


@pytest.mark.server
@pytest.mark.slow
def test_codex_answers_with_what_connect_wrote(up: Any, agent_clients: Any, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "work").mkdir(parents=True)
    _connect(up, home, "codex")
    done = subprocess.run(
        [str(agent_clients.codex), "exec", "--skip-git-repo-check", "Say hello"],
        cwd=home / "work",
        env=client_env(home),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT,
    )
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.stdout.strip()  # the model's answer (the demo's token soup)
    assert "provider: orchestrator" in done.stderr and "model: demo" in done.stderr
