"""The clients ``connect`` knows, and the two things it does for one: its settings for an
``Endpoint`` (printed) and ``--write`` (each of its config files edited after a backup).

Client family -> file: the vendors' agent CLIs (Claude Code, Codex, Qwen Code) ``vendor.py``;
opencode and its fork Kilo ``opencode.py``; clients of any OpenAI-compatible endpoint (Continue,
aider, Open WebUI) ``apps.py``. Each module says where its clients read their settings; the
limits every client is told come from ``limits.py`` (the endpoint's Codex catalog uses them too).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from orchestrator.connect import apps, files, opencode, vendor
from orchestrator.connect.base import HIDDEN, ClientConfig
from orchestrator.connect.endpoint import Endpoint, Model
from orchestrator.errors import UserError

CLIENTS: dict[str, Callable[[Endpoint, Model, str, str], ClientConfig]] = {
    "claude-code": vendor.claude_code,
    "codex": vendor.codex,
    "qwen-code": vendor.qwen_code,
    "opencode": opencode.opencode,
    "kilo": opencode.kilo,
    "continue": apps.continue_dev,
    "aider": apps.aider,
    "openwebui": apps.openwebui,
}


def _names(ep: Endpoint) -> list[str]:
    return [
        f"model {m.name}"
        + (f" (aliases: {', '.join(m.aliases)})" if m.aliases else "")
        + f": context window {m.context} tokens per request"
        for m in ep.models
    ]


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
    return replace(config, lines=[*config.lines, *_names(ep)])


def write(config: ClientConfig) -> list[tuple[Path, Path | None]]:
    """Apply ``config`` to each of its files after a backup; (the file, the backup or None) each.

    Raises:
        UserError: the client has no config file, or a file is not valid and was left unchanged
            (files before it are written, files after it are not).
    """
    if not config.edits:
        raise UserError(
            f"{config.client} keeps its connections in its own database; there is no file to write",
            hint="paste the settings above into it (or start it with the environment shown)",
        )
    done = []
    for edit in config.edits:
        saved = files.backup(edit.path)
        edit.apply(edit.path)
        done.append((edit.path, saved))
    return done
