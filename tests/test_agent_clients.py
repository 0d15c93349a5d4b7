"""The real agent clients, at their pinned versions (``scripts/install_agent_clients.sh``, the
``agent_clients`` fixture), each run once on its default config against ``orchestrator up``.

The served model is the demo echo model made to finish its answers (``stopping_model``): Claude
Code treats an answer cut at ``max_tokens`` as an error. The context is 32,768 tokens with
``allow_ctx_beyond_trained`` (Claude Code's first request alone is about 19K tokens; the GGUF's
trained context is 4,096). Each client must exit 0, print the model's answer, and get no non-2xx
answer from the endpoint (read from ``/metrics``); the model is ``speculative.adaptive``, and
every request of the client's API must show in the policy's ``/status`` rows with the figures
learned from its answer (on Claude Code's ``/v1/messages`` through native patch 0005).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agent_clients import Up, client_env, stopping_model

PINNED = {"claude": "2.1.197", "codex": "0.171.0", "opencode": "1.18.33"}
PROMPT = "Say hello in one word"
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
        "server:\n  port: 0\nmodels:\n"
        f"  - name: demo\n    path: {model}\n    ctx_size: 32768\n    allow_ctx_beyond_trained: true\n"
        "    parallel: 1\n    threads: 2\n    thinking: false\n    extra_args: ['-n', '64']\n"
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


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)


def _project(home: Path) -> Path:
    project = home / "project"
    project.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    return project


def _check(up: Up, answer: str, done: subprocess.CompletedProcess[str], route: str) -> None:
    assert done.returncode == 0, f"exit {done.returncode}\nstdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-3000:]}"
    assert answer.strip() in done.stdout, (answer, done.stdout[-2000:])
    statuses = _statuses(up.url)
    assert any(f'endpoint="{route}"' in k and 'status="200"' in k for k in statuses), statuses
    assert not [k for k in statuses if 'status="2' not in k], statuses
    # The draft length was chosen per request on this client's API and learned from its answers' timings.
    recent = httpx.get(up.url + "/status", timeout=30).json()["draft_policy"]["demo"]["recent"]
    mine = [r for r in recent if r["class"].startswith(f"{route}/")]
    assert mine and all("tokens_per_second" in r and "/" in r["accepted"] for r in mine), recent


def test_claude_code_print_mode(agent_clients: Any, served: tuple[Up, str], tmp_path: Path) -> None:
    """``claude -p`` on its defaults: /v1/messages, 24 tools, a trailing system message, adaptive thinking."""
    up, answer = served
    names = ("ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL",
             "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL")  # fmt: skip
    env = client_env(tmp_path, ANTHROPIC_BASE_URL=up.url, ANTHROPIC_API_KEY="none", **dict.fromkeys(names, "demo"))
    done = _run([str(agent_clients.claude), "-p", PROMPT], env, _project(tmp_path))
    _check(up, answer, done, "messages")


def test_codex_exec_default_config(agent_clients: Any, served: tuple[Up, str], tmp_path: Path) -> None:
    """``codex exec`` on its default tools (a namespace, web_search) through /v1/responses."""
    up, answer = served
    codex_home = tmp_path / ".codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(
        'model = "demo"\nmodel_provider = "local"\ncheck_for_update_on_startup = false\n\n'
        f'[model_providers.local]\nname = "local"\nbase_url = "{up.url}/v1"\nwire_api = "responses"\n'
        'env_key = "LOCAL_API_KEY"\n\n[analytics]\nenabled = false\n\n[otel]\nexporter = "none"\n'
    )
    env = client_env(tmp_path, LOCAL_API_KEY="none")
    done = _run([str(agent_clients.codex), "exec", "--skip-git-repo-check", PROMPT], env, _project(tmp_path))
    _check(up, answer, done, "responses")


def test_opencode_run_headless(agent_clients: Any, served: tuple[Up, str], tmp_path: Path) -> None:
    """``opencode run`` with an OpenAI-compatible provider: /v1/chat/completions, 10 tools, a title request.

    opencode installs its provider package (``@ai-sdk/openai-compatible``) from npm on first use."""
    up, answer = served
    config = tmp_path / ".config" / "opencode"
    config.mkdir(parents=True)
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "local",
        "options": {"baseURL": f"{up.url}/v1", "apiKey": "none"},
        "models": {"demo": {"name": "demo", "tool_call": True}},
    }
    settings = {"autoupdate": False, "share": "disabled", "provider": {"local": provider}, "model": "local/demo",
                "small_model": "local/demo"}  # fmt: skip
    (config / "opencode.json").write_text(json.dumps(settings))
    done = _run([str(agent_clients.opencode), "run", PROMPT], client_env(tmp_path), _project(tmp_path))
    _check(up, answer, done, "chat")
