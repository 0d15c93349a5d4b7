"""The real coding-agent clients at pinned versions, for tests: Claude Code, Codex CLI, opencode,
Qwen Code, Kilo Code CLI, Continue's CLI (``cn``) and aider.

``scripts/install_agent_clients.sh`` installs them into a cached folder outside the repository
(``$ORCHESTRATOR_CACHE/agent-clients/<key>/``: the npm clients with a Node 22 of their own, aider in
its own virtualenv); :func:`install` runs it once per test session and returns their paths. The
``agent_clients`` fixture (``tests/conftest.py``) yields them and skips, with the installer's reason,
only when npm is missing or its registry (or PyPI) cannot be reached.

:func:`client_env` is the environment every test (and ``orchestrator connect``) runs a client with:
its own home (no user config, no credentials), and every update check, telemetry and auto-update
switched off, so a client only ever talks to the base URL it is given.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INSTALLER = REPO / "scripts" / "install_agent_clients.sh"
INSTALL_TIMEOUT = 1200.0  # seconds; about 3 minutes on this project's machine with warm npm and pip caches

# exit status of the installer when npm, its registry or PyPI is unreachable (anything else is a failure)
UNREACHABLE = 2


@dataclass(frozen=True)
class AgentClients:
    """Paths of the installed executables (each named as its command)."""

    bin_dir: Path
    claude: Path
    codex: Path
    opencode: Path
    qwen: Path
    kilo: Path
    cn: Path
    aider: Path


class ClientsUnavailable(Exception):
    """npm is missing, or its registry or PyPI is unreachable (the message says which)."""


def install() -> AgentClients:
    """Run the installer (a no-op when the pinned versions are there) and return the paths.

    Raises:
        ClientsUnavailable: npm, its registry or PyPI cannot be reached.
        RuntimeError: the installer failed for another reason (its output is in the message).
    """
    proc = subprocess.run(
        ["bash", str(INSTALLER)], capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False
    )
    if proc.returncode == UNREACHABLE:
        raise ClientsUnavailable(proc.stderr.strip() or "npm unavailable")
    if proc.returncode != 0:
        raise RuntimeError(f"{INSTALLER.name} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    bin_dir = Path(proc.stdout.strip().splitlines()[-1])
    names = ("claude", "codex", "opencode", "qwen", "kilo", "cn", "aider")
    return AgentClients(bin_dir, *(bin_dir / name for name in names))


def client_env(home: Path, **extra: str) -> dict[str, str]:
    """Environment for one client run: a fresh ``HOME`` and no phoning home.

    Args:
        home: an empty folder that becomes the client's home (its config and session files).
        extra: variables to add (base URLs, keys, model names).
    """
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TERM", "TMPDIR", "TZ")}
    return {
        **keep,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        # Claude Code: no telemetry, error reporting, update check or auto-update
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        # Codex: no update check and no OpenTelemetry exporter (also set in its config.toml)
        "CODEX_HOME": str(home / ".codex"),
        "NO_UPDATE_NOTIFIER": "1",
        # opencode: no auto-update, no models.dev fetch, no share
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        # Kilo (opencode's fork): the same switches under its own name
        "KILO_DISABLE_AUTOUPDATE": "1",
        "KILO_DISABLE_MODELS_FETCH": "1",
        "KILO_DISABLE_SHARE": "1",
        "KILO_DISABLE_LSP_DOWNLOAD": "1",
        # Qwen Code and Continue's cn: no usage statistics
        "QWEN_USAGE_STATISTICS_ENABLED": "false",
        "CONTINUE_METRICS_ENABLED": "0",
        # aider: no PyPI version check, no analytics
        "AIDER_CHECK_UPDATE": "false",
        "AIDER_ANALYTICS": "false",
        **extra,
    }


# --- a served model whose answers end, and `orchestrator up` serving it ----------------------

ANSWER_TOKENS = 3  # the stopping model's answers: this many tokens, then <|im_end|>


def stopping_model(out: Path, gguf_like: Path) -> tuple[Path, str]:
    """An echo tiny model (``write_tiny_model(stop_after=...)``) whose answer to any chat prompt
    rendered with thinking off is :data:`ANSWER_TOKENS` tokens and then ``<|im_end|>``: clients that
    treat a cut answer as an error (Claude Code exits 1 on ``max_tokens``) get a finished one.
    Returns the file and the answer's text. ``gguf_like``: a tiny model with the same tokenizer."""
    from orchestrator.models.runtime import load_vocab
    from orchestrator.models.tiny import load_echo_map, write_tiny_model

    vocab = load_vocab(gguf_like)
    last = vocab.tokenize("<|im_start|>assistant\n<think>\n\n</think>\n\n")[-1]
    successor = load_echo_map(0.1).successor
    answer = [int(successor[last])]
    for _ in range(ANSWER_TOKENS - 1):
        answer.append(int(successor[answer[-1]]))
    path = write_tiny_model(out, mode="echo", q=0.1, stop_after=answer[-1])
    return path, vocab.detokenize(answer)


class Up:
    """``orchestrator up -c CONFIG`` as a child in its own process group and state folder."""

    def __init__(self, config: Path, state: Path, timeout: float = 300) -> None:
        import json
        import signal
        import sys
        import time

        self._signal = signal
        self.config, self.state = config, state
        self.log = state.parent / "up.log"
        env = {**os.environ, "ORCHESTRATOR_STATE": str(state), "ORCHESTRATOR_KV": str(state / "kv")}
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "orchestrator.cli.app", "up", "-c", str(config)],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run_json = state / "run.json"
            run = json.loads(run_json.read_text()) if run_json.is_file() else {}
            states = [i.get("state") for i in run.get("instances", {}).values()]
            if run.get("endpoint") and states and all(s == "ready" for s in states):
                self.url: str = run["endpoint"]
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.3)
        self.stop()
        raise RuntimeError("orchestrator up did not get ready:\n" + self.log.read_text()[-3000:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, self._signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, self._signal.SIGKILL)
                self.proc.wait(10)
