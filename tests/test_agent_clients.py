"""The real agent clients, at their pinned versions (``scripts/install_agent_clients.sh``, the
``agent_clients`` fixture), each run once on its default config against ``orchestrator up``, with
nothing but what ``orchestrator connect CLIENT --write`` wrote into its own config files (each in
its own empty home; the endpoint requires a key, so a key that did not arrive is a 401).

The served model is the demo echo model made to finish its answers (``stopping_model``): Claude
Code treats an answer cut at ``max_tokens`` as an error. The context is 65,536 tokens with
``allow_ctx_beyond_trained`` (Claude Code's first request alone is about 19K tokens; the GGUF's
trained context is 4,096). Each client must exit 0, print the model's answer, print no warning about
a setting ``connect`` wrote, and get no non-2xx answer from the endpoint during its run (read from
``/metrics``); the model is ``speculative.adaptive``, and every request of the client's API must
show in the policy's ``/status`` rows with the figures learned from its answer (on Claude Code's
``/v1/messages`` through native patch 0005).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agent_clients import Up, client_env, stopping_model

pytestmark = [pytest.mark.agents, pytest.mark.native, pytest.mark.slow]

PINNED = {
    "claude": "2.1.332",
    "codex": "0.171.0",
    "opencode": "1.18.33",
    "qwen": "0.24.4",
    "kilo": "7.7.7",
    "cn": "1.5.47",
    "aider": "0.86.2",
}
PROMPT = "Say hello in one word"
KEY = "sk-agents-test-key"
RUN_TIMEOUT = 600  # seconds; a 19K-token first prefill takes 10-40 s on 2 busy cores


@pytest.mark.parametrize("name", sorted(PINNED))
def test_pinned_client_runs(agent_clients: Any, name: str, tmp_path: Path) -> None:
    exe = getattr(agent_clients, name)
    out = subprocess.run(
        [str(exe), "--version"], env=client_env(tmp_path), capture_output=True, text=True, timeout=120, check=True
    )
    assert PINNED[name] in out.stdout


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, demo_model: Path, bin_info: Any) -> Iterator[tuple[Up, str]]:
    work = tmp_path_factory.mktemp("agents-up")
    model, answer = stopping_model(work / "stopping.gguf", demo_model)
    config = work / "models.yaml"
    config.write_text(
        f"server:\n  port: 0\n  api_keys: [{KEY}]\nmodels:\n"
        f"  - name: demo\n    path: {model}\n    ctx_size: 65536\n    allow_ctx_beyond_trained: true\n"
        "    parallel: 1\n    threads: 1\n    thinking: false\n    extra_args: ['-n', '64']\n"
        "    speculative: {type: draft-mtp, n_max: 3, adaptive: true}\n"
    )
    (work / "state").mkdir()
    up = Up(config, work / "state")
    try:
        yield up, answer
    finally:
        up.stop()


def _statuses(url: str) -> dict[str, float]:
    out = {}
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith("orchestrator_requests_total{"):
            labels, value = line.rsplit(" ", 1)
            out[labels] = float(value)
    return out


def _home(tmp_path: Path) -> tuple[Path, Path]:
    """An empty home with a git project in it (the folder the client runs in)."""
    project = tmp_path / "home" / "project"
    project.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    return tmp_path / "home", project


def _connect(up: Up, home: Path, target: str) -> str:
    """``orchestrator connect TARGET --write`` into ``home``, as a user would run it; its output."""
    env = {**client_env(home), "ORCHESTRATOR_STATE": str(up.state)}
    argv = [sys.executable, "-m", "orchestrator.cli.app", "connect", target, "-c", str(up.config), "--write"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert up.url in done.stdout and "wrote " in done.stdout  # the running endpoint's real port
    assert KEY not in done.stdout  # written, not printed
    return done.stdout


def _run_client(
    up: Up, answer: str, route: str, argv: list[str], home: Path, cwd: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run one client; it must answer and get only 2xx answers from the endpoint meanwhile."""
    before = _statuses(up.url)
    done = subprocess.run(
        argv, env=client_env(home, **env), cwd=cwd, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False,
    )  # fmt: skip
    report = f"exit {done.returncode}\nstdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-3000:]}"
    assert done.returncode == 0, report
    assert answer.strip() in done.stdout, report
    after = _statuses(up.url)
    new = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    assert any(f'endpoint="{route}"' in k and 'status="200"' in k for k in new), (new, report)
    assert not [k for k in new if 'status="2' not in k], (new, report)
    # The draft length was chosen per request on this client's API and learned from its answers' timings.
    status = httpx.get(up.url + "/status", headers={"Authorization": f"Bearer {KEY}"}, timeout=30).json()
    recent = status["draft_policy"]["demo"]["recent"]
    mine = [r for r in recent if r["class"].startswith(f"{route}/")]
    assert mine and all("tokens_per_second" in r and "/" in r["accepted"] for r in mine), recent
    return done


def test_claude_code_print_mode(agent_clients: Any, served: tuple[Up, str], tmp_path: Path) -> None:
    """``claude -p`` on its defaults: /v1/messages, its tools, a trailing system message, adaptive thinking;
    the address, key, model names and window only from the ``env`` block of ~/.claude/settings.json."""
    up, answer = served
    home, project = _home(tmp_path)
    _connect(up, home, "claude-code")
    done = _run_client(up, answer, "messages", [str(agent_clients.claude), "-p", PROMPT], home, project)
    assert "CLAUDE_CODE_" not in done.stderr  # no complaint about a window or limit connect set


def test_codex_exec_default_config(agent_clients: Any, served: tuple[Up, str], tmp_path: Path) -> None:
    """``codex exec`` on its default tools (a namespace, web_search) through /v1/responses; the key
    from the variable config.toml names (Codex reads keys only from the environment)."""
    up, answer = served
    home, project = _home(tmp_path)
    _connect(up, home, "codex")
    argv = [str(agent_clients.codex), "exec", "--skip-git-repo-check", PROMPT]
    done = _run_client(up, answer, "responses", argv, home, project, ORCHESTRATOR_API_KEY=KEY)
    assert "provider: orchestrator" in done.stderr and "model: demo" in done.stderr
    assert "is ignored" not in done.stderr  # every key connect wrote is one Codex reads
    assert "Reconnecting" not in done.stderr  # supports_websockets = false: no WebSocket attempt


def test_codex_builtin_provider_falls_back_from_websocket_at_once(
    agent_clients: Any, served: tuple[Up, str], tmp_path: Path
) -> None:
    """``codex exec`` with the built-in ``openai`` provider pointed at the endpoint (``openai_base_url``,
    no custom provider, so nothing says ``supports_websockets = false``): it opens a WebSocket on
    ``GET /v1/responses`` first, gets the 426 and goes on over HTTP at once: no "Reconnecting"
    retries, and the turn completes with only 2xx answers counted in /metrics (the 426 is answered
    by the route table and not counted: no model is involved)."""
    up, answer = served
    home, project = _home(tmp_path)
    config = home / ".codex" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        f'model = "demo"\nopenai_base_url = "{up.url}/v1"\nmodel_context_window = 65536\n'
        "model_auto_compact_token_limit = 50000\n"
    )
    argv = [str(agent_clients.codex), "exec", "--skip-git-repo-check", PROMPT]
    done = _run_client(up, answer, "responses", argv, home, project, CODEX_API_KEY=KEY, OPENAI_API_KEY=KEY)
    assert "Reconnecting" not in done.stderr + done.stdout, done.stderr[-3000:]


@pytest.mark.parametrize(
    ("target", "command"),
    [("opencode", ["opencode", "run"]), ("kilo", ["kilo", "run"]), ("qwen-code", ["qwen", "-p"]),
     ("continue", ["cn", "-p"])],
)  # fmt: skip
def test_chat_completions_agent(
    agent_clients: Any, served: tuple[Up, str], tmp_path: Path, target: str, command: list[str]
) -> None:
    """opencode and Kilo (``run``: its tools, a title request), Qwen Code and Continue's ``cn``
    (``-p``: headless) on /v1/chat/completions. opencode and Kilo install their provider package
    (``@ai-sdk/openai-compatible``) from npm on first use."""
    up, answer = served
    home, project = _home(tmp_path)
    _connect(up, home, target)
    done = _run_client(
        up, answer, "chat", [str(getattr(agent_clients, command[0])), *command[1:], PROMPT], home, project
    )
    assert done.returncode == 0 and answer.strip() in done.stdout  # (checked in _run_client too, with the report)


def test_aider_message(agent_clients: Any, served: tuple[Up, str], tmp_path: Path) -> None:
    """``aider --message`` (one turn, no prompts) on /v1/chat/completions through litellm, with the
    model, address and key from ~/.aider.conf.yml and the window from ~/.aider.model.metadata.json."""
    up, answer = served
    home, project = _home(tmp_path)
    _connect(up, home, "aider")
    argv = [str(agent_clients.aider), "--message", PROMPT, "--yes-always"]
    done = _run_client(up, answer, "chat", argv, home, project)
    assert "Model: openai/demo" in done.stdout
    assert "Unknown context window" not in done.stdout  # the metadata file gave it
