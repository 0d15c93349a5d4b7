"""opencode and its fork Kilo Code CLI: the same config format in different files.

- opencode: ``$XDG_CONFIG_HOME/opencode/opencode.json`` (``~/.config/opencode``);
- Kilo CLI: ``$XDG_CONFIG_HOME/kilo/kilo.json`` (``~/.config/kilo``; it reads ``config.json``,
  ``kilo.json``, ``kilo.jsonc``, ``opencode.json``, ``opencode.jsonc`` there, later files winning).

Each gets an OpenAI-compatible ``provider`` (``@ai-sdk/openai-compatible``, ``options.baseURL`` and
``apiKey``) listing every model with its ``limit`` (``context``, ``output``): without it a model it
does not know has no window and is never compacted; with it, it compacts when a turn's tokens pass
``context`` less ``output`` (at most 32,000). ``model`` and ``small_model`` (titles, summaries) both
name ours, so no request goes to the client's own hosted models.
"""

from __future__ import annotations

from orchestrator.connect import files
from orchestrator.connect.base import PROVIDER, ClientConfig, FileEdit, home, json_lines, out_tokens
from orchestrator.connect.endpoint import Endpoint, Model


def _settings(ep: Endpoint, m: Model, key: str, schema: str) -> dict[str, object]:
    models = {x.name: {"name": x.name, "limit": {"context": x.context, "output": out_tokens(x)}} for x in ep.models}
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "orchestrator",
        "options": {"baseURL": f"{ep.url}/v1", "apiKey": key},
        "models": models,
    }
    chosen = f"{PROVIDER}/{m.name}"
    return {"$schema": schema, "provider": {PROVIDER: provider}, "model": chosen, "small_model": chosen}


def _config(client: str, title: str, ep: Endpoint, m: Model, key: str, shown: str) -> ClientConfig:
    folder, name, schema = {
        "opencode": ("opencode", "opencode.json", "https://opencode.ai/config.json"),
        "kilo": ("kilo", "kilo.json", "https://app.kilo.ai/config.json"),
    }[client]
    path = home("XDG_CONFIG_HOME", ".config") / folder / name
    update = _settings(ep, m, key, schema)
    lines = [f"{title}: {path}", *json_lines(_settings(ep, m, shown, schema))]
    return ClientConfig(client, lines, (FileEdit(path, lambda p: files.merge_json(p, update)),))


def opencode(ep: Endpoint, m: Model, key: str, shown: str) -> ClientConfig:
    return _config("opencode", "opencode", ep, m, key, shown)


def kilo(ep: Endpoint, m: Model, key: str, shown: str) -> ClientConfig:
    return _config("kilo", "Kilo Code CLI", ep, m, key, shown)
