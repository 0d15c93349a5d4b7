"""The real Claude Code and Codex CLIs (pinned, ``agent_clients``) answer through ``orchestrator up``
serving the demo model with nothing but what ``orchestrator connect CLIENT --write`` wrote into
their own config files (each in its own empty home; no update checks or telemetry).

The model is the demo echo model made to finish its answer (``stopping_model``: a fixed answer,
then ``<|im_end|>``), stretched to a 64K window (``allow_ctx_beyond_trained`` adds
``--override-kv``; its echo weights do not depend on position) so Claude Code's ~19K-token first
request fits. Each client must exit 0 and print that answer.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from supervision_helpers import RunningUp

from tests.agent_clients import client_env, stopping_model

CLIENT_TIMEOUT = 600.0  # seconds; a 19K-token prefill of the demo takes ~25 s on 2 idle cores


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, demo_model: Path) -> Any:
    work = tmp_path_factory.mktemp("connect-agents")
    model, answer = stopping_model(work / "stopping.gguf", demo_model)
    config = work / "models.yaml"
    config.write_text(
        "server: {host: 127.0.0.1, port: 0, timeouts: {load: 120}}\n"
        "models:\n"
        f"  - name: demo\n    path: {model}\n    aliases: [tiny]\n    ctx_size: 65536\n"
        "    allow_ctx_beyond_trained: true\n    threads: 2\n    thinking: false\n"
    )
    with RunningUp(config, work / "state") as running:
        running.answer = answer.strip()
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
    _connect(up, home, "claude-code")
    assert json.loads((home / ".claude" / "settings.json").read_text())["env"]["ANTHROPIC_MODEL"] == "demo"
    done = subprocess.run(
        [str(agent_clients.claude), "-p", "Say hello"],
        cwd=home,
        env=client_env(home),  # no ANTHROPIC_* variables: only the settings file says where to go
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT,
    )
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert up.answer in done.stdout


@pytest.mark.server
@pytest.mark.slow
def test_codex_answers_with_what_connect_wrote(up: Any, agent_clients: Any, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "work").mkdir(parents=True)
    _connect(up, home, "codex")
    done = subprocess.run(
        [str(agent_clients.codex), "exec", "--skip-git-repo-check", "Say hello"],
        cwd=home / "work",
        env=client_env(home),  # no provider flags: only config.toml says where to go
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT,
    )
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert up.answer in done.stdout
    assert "provider: orchestrator" in done.stderr and "model: demo" in done.stderr
