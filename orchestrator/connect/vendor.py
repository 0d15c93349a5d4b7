"""The vendors' own agent CLIs: Claude Code, Codex CLI, Qwen Code.

Where each reads its settings (checked against the pinned clients the tests run):
- Claude Code: ``env`` in ``$CLAUDE_CONFIG_DIR/settings.json`` (``~/.claude/settings.json``):
  ``ANTHROPIC_BASE_URL`` (no ``/v1``: it posts to ``/v1/messages``), ``ANTHROPIC_AUTH_TOKEN`` (sent as
  ``Authorization: Bearer``, no interactive key approval), a model name for every tier;
- Codex CLI: ``$CODEX_HOME/config.toml`` (``~/.codex``): a ``[model_providers.X]`` with ``wire_api =
  "responses"`` (the only API it speaks) and ``supports_websockets = false`` (no WebSocket attempt
  before the first turn), ``model``, ``model_provider``, ``model_context_window``; a
  key only through ``env_key`` (the variable that holds it);
- Qwen Code: ``$QWEN_HOME/settings.json`` (``~/.qwen``): an OpenAI-compatible entry in
  ``modelProviders.openai`` (``baseUrl``, ``envKey``, ``generationConfig.contextWindowSize`` and
  ``samplingParams.max_tokens``), ``security.auth.selectedType: openai``, ``model.name``, and the
  key in the ``env`` block (variables it sets when the shell has none). Without a window it assumes
  200K tokens for a model it does not know; with one it compacts at the smaller of 85% of it and
  the window less its summary reserve and 13K.
"""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.connect import files
from orchestrator.connect.base import (
    PROVIDER,
    ClientConfig,
    FileEdit,
    compact_at,
    export,
    home,
    json_lines,
    out_tokens,
)
from orchestrator.connect.endpoint import KEY_ENV, Endpoint, Model

# the smallest CLAUDE_CODE_AUTO_COMPACT_WINDOW Claude Code 2.1.3xx takes as written
AUTO_COMPACT_MINIMUM = 100_000

# What the endpoint serves, in Claude Code's own capability names (CLAUDE_CODE_MODEL_CAPABILITIES:
# "cap,-cap" for every model, or "model=cap,..." entries split by ";"; read from 2.1.332's bundle).
# For a model name it does not know, it guesses: mid-conversation tool changes on (they are served:
# rendered where they happen, anthropic.tool_changes), everything else from the name. Said here, so
# it neither relies on the guess nor sends what nothing here serves:
# - on: ``mid_conv_system`` (system turns inside messages, rendered in place as reminders),
#   ``mid_conv_tool_change`` (tool_addition / tool_removal), ``adaptive_thinking``
#   (``thinking: {type: adaptive}``, mapped to the template's enable_thinking);
# - off: ``effort`` (output_config.effort: llama-server has no such knob), ``context_management``
#   (server-side clearing of old tool results: not done here), ``rejects_disabled_thinking`` (this
#   endpoint takes ``thinking: disabled``), ``refusal_fallback`` (no server-side fallback model).
CLAUDE_CAPABILITIES = (
    "mid_conv_system,mid_conv_tool_change,adaptive_thinking,"
    "-effort,-context_management,-rejects_disabled_thinking,-refusal_fallback"
)

# Claude Code's stream watchdog aborts a stream without an event for this long (ms; it never takes
# less than its 300 s default): a first turn's prefill of a long prompt on a slow host may take
# minutes before the first token, and the keep-alives meanwhile are SSE comments, which an event
# watchdog does not see.
CLAUDE_STREAM_IDLE_MS = 900_000


def claude_code(ep: Endpoint, m: Model, key: str, shown: str) -> ClientConfig:
    env = {
        "ANTHROPIC_BASE_URL": ep.url,
        "ANTHROPIC_AUTH_TOKEN": key,
        "ANTHROPIC_MODEL": m.name,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": m.name,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": m.name,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": m.name,
        "ANTHROPIC_SMALL_FAST_MODEL": m.name,
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(out_tokens(m)),
        # the real window: for a model name it does not know, Claude Code assumes 1M tokens (2.1.3xx;
        # 200K before) and would compact too late, running into context_length_exceeded
        "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(m.context),
        # only our endpoint: no telemetry, error reports or update checks to Anthropic
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        # what the endpoint serves, for a model it does not recognise (instead of its guess)
        "CLAUDE_CODE_MODEL_CAPABILITIES": CLAUDE_CAPABILITIES,
        "CLAUDE_STREAM_IDLE_TIMEOUT_MS": str(CLAUDE_STREAM_IDLE_MS),
    }
    if m.context >= AUTO_COMPACT_MINIMUM:
        # the window its auto-compaction is computed against (it compacts about min(output, 20K) +
        # 13K tokens before the end of it); 2.1.3xx reads a smaller value as its 100K minimum and
        # says so on every start, and bounds a model it does not know by the window above
        env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] = str(m.context)
    path = home("CLAUDE_CONFIG_DIR", ".claude") / "settings.json"
    lines = [f'Claude Code: the "env" block of {path}, or in your shell:']
    lines += [export(k, shown if k == "ANTHROPIC_AUTH_TOKEN" else v) for k, v in env.items()]
    return ClientConfig("claude-code", lines, (FileEdit(path, lambda p: files.merge_json(p, {"env": env})),))


def codex(ep: Endpoint, m: Model, key: str, shown: str) -> ClientConfig:
    top = {
        "model": m.name,
        "model_provider": PROVIDER,
        "model_context_window": m.context,
        # without catalog metadata for the model Codex assumes 272K and would never compact in time
        "model_auto_compact_token_limit": compact_at(m),
    }
    provider: dict[str, object] = {"name": "orchestrator (llama.cpp)", "base_url": f"{ep.url}/v1"}
    # Codex opens a WebSocket on GET /v1/responses first unless told not to; the endpoint answers
    # 426 (it speaks HTTP only), so it would fall back anyway, but not trying costs nothing
    provider.update(wire_api="responses", supports_websockets=False, env_key=KEY_ENV if ep.key else None)
    tables: dict[str, dict[str, object]] = {f"model_providers.{PROVIDER}": provider}
    path = home("CODEX_HOME", ".codex") / "config.toml"
    lines = [f"Codex CLI: {path}"] + [f"  {k} = {json.dumps(v)}" for k, v in top.items()]
    for name, values in tables.items():
        lines += [f"  [{name}]"] + [f"  {k} = {json.dumps(v)}" for k, v in values.items() if v is not None]
    if ep.key:
        lines += ["and in your shell (Codex reads keys only from the environment):", export(KEY_ENV, shown)]
    return ClientConfig("codex", lines, (FileEdit(path, lambda p: files.merge_toml(p, top, tables)),))


def qwen_code(ep: Endpoint, m: Model, key: str, shown: str) -> ClientConfig:
    def entry(x: Model) -> dict[str, object]:
        window = {"contextWindowSize": x.context, "samplingParams": {"max_tokens": out_tokens(x)}}
        return {"id": x.name, "name": f"{x.name} (orchestrator)", "baseUrl": f"{ep.url}/v1", "envKey": KEY_ENV,
                "generationConfig": window}  # fmt: skip

    def settings(k: str) -> dict[str, object]:
        return {
            "modelProviders": {"openai": [entry(x) for x in ep.models]},
            "security": {"auth": {"selectedType": "openai"}},
            "model": {"name": m.name, "baseUrl": f"{ep.url}/v1"},
            "env": {KEY_ENV: k},
        }

    path = home("QWEN_HOME", ".qwen") / "settings.json"
    lines = [f"Qwen Code: {path}", *json_lines(settings(shown))]

    def apply(p: Path) -> None:
        files.merge_json(p, settings(key), lists={"modelProviders.openai": "id"})

    return ClientConfig("qwen-code", lines, (FileEdit(path, apply),))
