"""Clients of any OpenAI-compatible endpoint: Continue, aider, Open WebUI.

- Continue (the IDE extension and its CLI ``cn``): a ``models`` entry in
  ``$CONTINUE_GLOBAL_DIR/config.yaml`` (``~/.continue``): provider ``openai`` with ``apiBase``, and
  ``defaultCompletionOptions.contextLength`` / ``maxTokens`` (without them it assumes a window of its
  own and reserves 35% of it for the answer);
- aider: ``~/.aider.conf.yml`` (``model: openai/NAME``, ``openai-api-base``, ``openai-api-key``: the
  same as ``OPENAI_API_BASE`` / ``OPENAI_API_KEY`` and ``--model openai/NAME``),
  ``~/.aider.model.metadata.json`` (litellm's entry per model: ``max_input_tokens``,
  ``max_output_tokens``, no cost; without it aider warns that the window is unknown) and
  ``~/.aider.model.settings.yml`` (``extra_params.max_tokens``: the longest answer it asks for).
  aider reads each of them from the home folder, then the git root and the current folder;
- Open WebUI keeps connections in its own database: settings to paste, no file.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.connect import files
from orchestrator.connect.base import ClientConfig, FileEdit, export, home, json_lines, out_tokens
from orchestrator.connect.endpoint import Endpoint, Model


def continue_dev(ep: Endpoint, m: Model, key: str, shown: str) -> ClientConfig:
    def item(k: str) -> dict[str, object]:
        return {
            "name": f"{m.name} (orchestrator)",
            "provider": "openai",
            "model": m.name,
            "apiBase": f"{ep.url}/v1",
            "apiKey": k,
            "defaultCompletionOptions": {"contextLength": m.context, "maxTokens": out_tokens(m)},
            "roles": ["chat", "edit", "apply"],
        }

    path = home("CONTINUE_GLOBAL_DIR", ".continue") / "config.yaml"
    top = {"name": "Local Assistant", "version": "1.0.0", "schema": "v1"}
    # printed as the YAML it writes (a Python repr of the nested options would not paste)
    lines = [f"Continue: a models entry in {path}:"] + ["  " + x for x in files.yaml_lines({"models": [item(shown)]})]

    def apply(p: Path) -> None:
        files.merge_yaml_list(p, top, "models", item(key), "name")

    return ClientConfig("continue", lines, (FileEdit(path, apply),))


def aider(ep: Endpoint, m: Model, key: str, shown: str) -> ClientConfig:
    def conf(k: str) -> dict[str, object]:
        return {"model": f"openai/{m.name}", "openai-api-base": f"{ep.url}/v1", "openai-api-key": k}

    metadata = {
        f"openai/{x.name}": {
            "max_tokens": out_tokens(x),
            "max_input_tokens": x.context,
            "max_output_tokens": out_tokens(x),
            "input_cost_per_token": 0,
            "output_cost_per_token": 0,
            "litellm_provider": "openai",
            "mode": "chat",
        }
        for x in ep.models
    }
    settings = [{"name": f"openai/{x.name}", "extra_params": {"max_tokens": out_tokens(x)}} for x in ep.models]
    paths = [Path.home() / f".aider.{name}" for name in ("conf.yml", "model.metadata.json", "model.settings.yml")]
    lines = [f"aider: {paths[0]}:"] + ["  " + x for x in files.yaml_lines(conf(shown))]
    lines += [f"{paths[1]}:", *json_lines(metadata), f"{paths[2]}:"]
    lines += ["  " + x for x in files.yaml_lines(settings)]
    lines += ["or in your shell (the window still comes from the metadata file):"]
    lines += [export("OPENAI_API_BASE", f"{ep.url}/v1"), export("OPENAI_API_KEY", shown)]
    lines += [f"  aider --model openai/{m.name}"]
    edits = (
        FileEdit(paths[0], lambda p: files.merge_yaml_map(p, conf(key))),
        FileEdit(paths[1], lambda p: files.merge_json(p, metadata)),
        FileEdit(paths[2], lambda p: files.merge_yaml_items(p, settings, "name")),
    )
    return ClientConfig("aider", lines, edits)


def openwebui(ep: Endpoint, m: Model, key: str, shown: str) -> ClientConfig:
    docker = ep.url.replace("127.0.0.1", "host.docker.internal").replace("localhost", "host.docker.internal")
    lines = [
        "Open WebUI: Admin Panel > Settings > Connections > OpenAI API, add a connection:",
        f"  URL: {ep.url}/v1   (Open WebUI in Docker: {docker}/v1, and bind server.host so the container reaches it)",
        f"  Key: {shown}",
        "or start it with this environment:",
        export("OPENAI_API_BASE_URL", f"{ep.url}/v1"),
        export("OPENAI_API_KEY", shown),
    ]
    return ClientConfig("openwebui", lines)
