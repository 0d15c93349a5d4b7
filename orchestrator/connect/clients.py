"""Each client's settings for an ``Endpoint``: what to print, which config file is the client's
own, and how ``--write`` changes it.

Where each client reads its settings (checked against the pinned clients the tests run):
- Claude Code: ``env`` in ``$CLAUDE_CONFIG_DIR/settings.json`` (``~/.claude/settings.json``):
  ``ANTHROPIC_BASE_URL`` (no ``/v1``: it posts to ``/v1/messages``), ``ANTHROPIC_AUTH_TOKEN`` (sent as
  ``Authorization: Bearer``, no interactive key approval), a model name for every tier;
- Codex CLI: ``$CODEX_HOME/config.toml`` (``~/.codex``): a ``[model_providers.X]`` with ``wire_api =
  "responses"`` (the only API it speaks), ``model``, ``model_provider``, ``model_context_window``; a
  key only through ``env_key`` (the variable that holds it);
- opencode: ``provider`` in ``$XDG_CONFIG_HOME/opencode/opencode.json``, an OpenAI-compatible one;
- Continue: a ``models`` entry in ``~/.continue/config.yaml`` (provider ``openai`` with ``apiBase``);
- Open WebUI keeps connections in its own database: settings to paste, no file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.connect import files
from orchestrator.connect.endpoint import KEY_ENV, Endpoint, Model
from orchestrator.errors import UserError

PROVIDER = "orchestrator"
# printed in place of the key: one shell word, so a pasted `export X=...` line runs (and fails to
# authenticate visibly) instead of being a syntax error
HIDDEN = "hidden-key--show-key-prints-it"


@dataclass(frozen=True)
class ClientConfig:
    """What ``connect`` prints (``lines``) and writes (``apply`` on ``path``; None: no file)."""

    client: str
    lines: list[str]
    path: Path | None
    apply: Callable[[Path], None] | None


def _home(var: str, default: str) -> Path:
    return Path(os.environ.get(var) or Path.home() / default).expanduser()


def _names(ep: Endpoint) -> list[str]:
    return [
        f"model {m.name}"
        + (f" (aliases: {', '.join(m.aliases)})" if m.aliases else "")
        + f": context window {m.context} tokens per request"
        for m in ep.models
    ]


def _out_tokens(m: Model) -> int:
    """The longest answer a client asks for: ``--max-output``, else a quarter of the window (agents
    send long prompts), at most 32,000."""
    return m.max_output or max(256, min(32000, m.context // 4))


def _compact_at(m: Model) -> int:
    """Prompt tokens at which an agent should compact its history: the window less the longest
    answer and a margin of 5% (a turn that starts below it still fits with its answer)."""
    return max(m.context // 2, m.context - _out_tokens(m) - m.context // 20)


def claude_code(ep: Endpoint, m: Model, key: str, shown: str) -> ClientConfig:
    env = {
        "ANTHROPIC_BASE_URL": ep.url,
        "ANTHROPIC_AUTH_TOKEN": key,
        "ANTHROPIC_MODEL": m.name,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": m.name,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": m.name,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": m.name,
        "ANTHROPIC_SMALL_FAST_MODEL": m.name,
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(_out_tokens(m)),
        # the real window: for a model name it does not know, Claude Code assumes 1M tokens (2.1.3xx;
        # 200K before) and would compact too late, running into context_length_exceeded
        "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(m.context),
        # the window its auto-compaction is computed against (it compacts about min(output, 20K) +
        # 13K tokens before the end of it)
        "CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(m.context),
        # only our endpoint: no telemetry, error reports or update checks to Anthropic
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    path = _home("CLAUDE_CONFIG_DIR", ".claude") / "settings.json"
    lines = [f'Claude Code: the "env" block of {path}, or in your shell:']
    lines += [f"  export {k}={shown if k == 'ANTHROPIC_AUTH_TOKEN' else v}" for k, v in env.items()]
    return ClientConfig("claude-code", lines, path, lambda p: files.merge_json(p, {"env": env}))


def codex(ep: Endpoint, m: Model, key: str, shown: str) -> ClientConfig:
    top = {
        "model": m.name,
        "model_provider": PROVIDER,
        "model_context_window": m.context,
        # without catalog metadata for the model Codex assumes 272K and would never compact in time
        "model_auto_compact_token_limit": _compact_at(m),
        "model_max_output_tokens": _out_tokens(m),
    }
    provider: dict[str, object] = {"name": "orchestrator (llama.cpp)", "base_url": f"{ep.url}/v1"}
    provider.update(wire_api="responses", env_key=KEY_ENV if ep.key else None)
    tables: dict[str, dict[str, object]] = {f"model_providers.{PROVIDER}": provider}
    path = _home("CODEX_HOME", ".codex") / "config.toml"
    lines = [f"Codex CLI: {path}"] + [f"  {k} = {json.dumps(v)}" for k, v in top.items()]
    for name, values in tables.items():
        lines += [f"  [{name}]"] + [f"  {k} = {json.dumps(v)}" for k, v in values.items() if v is not None]
    if ep.key:
        lines.append(f"  and in your shell: export {KEY_ENV}={shown}")
    return ClientConfig("codex", lines, path, lambda p: files.merge_toml(p, top, tables))


def opencode(ep: Endpoint, m: Model, key: str, shown: str) -> ClientConfig:
    models = {x.name: {"name": x.name, "limit": {"context": x.context, "output": _out_tokens(x)}} for x in ep.models}

    def provider(k: str) -> dict[str, object]:
        options = {"baseURL": f"{ep.url}/v1", "apiKey": k}
        return {"npm": "@ai-sdk/openai-compatible", "name": "orchestrator", "options": options, "models": models}

    path = _home("XDG_CONFIG_HOME", ".config") / "opencode" / "opencode.json"
    update = {"$schema": "https://opencode.ai/config.json", "provider": {PROVIDER: provider(key)}}
    update["model"] = f"{PROVIDER}/{m.name}"
    shown_json = {**update, "provider": {PROVIDER: provider(shown)}}
    lines = [f"opencode: {path}"] + ["  " + line for line in json.dumps(shown_json, indent=2).splitlines()]
    return ClientConfig("opencode", lines, path, lambda p: files.merge_json(p, update))


def continue_dev(ep: Endpoint, m: Model, key: str, shown: str) -> ClientConfig:
    def item(k: str) -> dict[str, object]:
        return {
            "name": f"{m.name} (orchestrator)",
            "provider": "openai",
            "model": m.name,
            "apiBase": f"{ep.url}/v1",
            "apiKey": k,
            "defaultCompletionOptions": {"contextLength": m.context, "maxTokens": _out_tokens(m)},
            "roles": ["chat", "edit", "apply"],
        }

    path = Path.home() / ".continue" / "config.yaml"
    top = {"name": "Local Assistant", "version": "1.0.0", "schema": "v1"}
    # printed as the YAML it writes (a Python repr of the nested options would not paste)
    lines = [f"Continue: a models entry in {path}:"] + ["  " + x for x in files.yaml_lines({"models": [item(shown)]})]
    return ClientConfig("continue", lines, path, lambda p: files.merge_yaml_list(p, top, "models", item(key), "name"))


def openwebui(ep: Endpoint, m: Model, key: str, shown: str) -> ClientConfig:
    docker = ep.url.replace("127.0.0.1", "host.docker.internal").replace("localhost", "host.docker.internal")
    lines = [
        "Open WebUI: Admin Panel > Settings > Connections > OpenAI API, add a connection:",
        f"  URL: {ep.url}/v1   (Open WebUI in Docker: {docker}/v1, and bind server.host so the container reaches it)",
        f"  Key: {shown}",
        "or start it with:",
        f"  OPENAI_API_BASE_URL={ep.url}/v1 OPENAI_API_KEY={shown}",
    ]
    return ClientConfig("openwebui", lines, None, None)


CLIENTS: dict[str, Callable[[Endpoint, Model, str, str], ClientConfig]] = {
    "claude-code": claude_code,
    "codex": codex,
    "opencode": opencode,
    "continue": continue_dev,
    "openwebui": openwebui,
}


def client_config(
    client: str, ep: Endpoint, model: str | None = None, show_key: bool = False, max_output: int | None = None
) -> ClientConfig:
    """``client``'s settings for ``ep`` serving ``model`` (default: the first model), the key
    hidden in what is printed unless ``show_key`` (it is always written in full); ``max_output``
    caps the answers the client asks for (clients that have such a setting).

    Raises:
        UserError: an unknown client or model.
    """
    make = CLIENTS.get(client)
    if make is None:
        raise UserError(f"unknown client {client!r}", hint=f"use one of: {', '.join(CLIENTS)}")
    key = ep.key or "none"  # the endpoint takes any key when server.api_keys is empty
    if max_output is not None and max_output < 1:
        raise UserError(f"--max-output {max_output}: give a number of tokens of 1 or more")
    if max_output is not None:
        ep = replace(ep, models=tuple(replace(m, max_output=max_output) for m in ep.models))
    config = make(ep, ep.model(model), key, key if show_key or ep.key is None else HIDDEN)
    return ClientConfig(config.client, [*config.lines, *_names(ep)], config.path, config.apply)


def write(config: ClientConfig) -> tuple[Path, Path | None]:
    """Apply ``config`` to its file after a backup; (the file, the backup or None).

    Raises:
        UserError: the client has no config file, or the file is not valid and was left unchanged.
    """
    if config.path is None or config.apply is None:
        raise UserError(
            f"{config.client} keeps its connections in its own database; there is no file to write",
            hint="paste the settings above into it (or start it with the environment shown)",
        )
    saved = files.backup(config.path)
    config.apply(config.path)
    return config.path, saved
