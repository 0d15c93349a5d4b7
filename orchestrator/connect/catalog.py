"""Codex's model catalog entry for a served model (Codex's ``ModelInfo``, the ``models`` array of
its ``/models`` answer): the slot's window, the compaction limit, reasoning levels, modalities.

Without an entry for the model Codex logs "Model metadata for NAME not found" and falls back to
generic metadata (a 272K window, 10 KB tool output, no parallel tool calls). Codex 0.171 fetches
``/models`` only when it signs in to ChatGPT or its provider has an auth command, and reads a file
only through ``model_catalog_json``; either way an entry must carry ``base_instructions``, which
then **replace Codex's own system prompt** (an empty one leaves Codex without any). So
``connect codex`` does not write a catalog file: Codex keeps its prompt, and ``config.toml`` carries
the window and the compaction limit (``model_context_window``, ``model_auto_compact_token_limit``),
which Codex applies over the fallback. The endpoint serves this entry on ``GET /v1/models`` to
Codex's requests, for a Codex that fetches it, with the short instructions below.
"""

from __future__ import annotations

from typing import Any

from orchestrator.connect.limits import compact_at, out_tokens

# Codex validates the entry: these levels are Codex's own names (ReasoningEffort)
_LEVELS = (
    ("low", "thinks briefly"),
    ("medium", "thinks before answering"),
    ("high", "thinks longest"),
)

INSTRUCTIONS = (
    "You are Codex, a coding agent running in the user's terminal on a model served locally by "
    "llama.cpp. Work in the user's repository: read the relevant code before changing it, keep its "
    "conventions, make focused edits with the tools you have, run the project's checks when you can, "
    "and say briefly what you changed and what you could not verify."
)


def codex_entry(name: str, context: int, *, thinking: bool, images: bool) -> dict[str, Any]:
    """The catalog entry of model ``name`` whose requests get ``context`` tokens (a slot)."""
    levels = [{"effort": e, "description": d} for e, d in _LEVELS] if thinking else []
    return {
        "slug": name,
        "display_name": name,
        "description": "served by orchestrator (llama.cpp)",
        "default_reasoning_level": "medium" if thinking else "none",
        "supported_reasoning_levels": levels,
        "shell_type": "shell_command",
        "visibility": "list",
        "supported_in_api": True,
        "priority": 1,
        "upgrade": None,
        "base_instructions": INSTRUCTIONS,
        "supports_reasoning_summaries": False,
        "support_verbosity": False,
        "default_verbosity": None,
        "apply_patch_tool_type": None,  # Codex picks its default apply_patch tool
        "truncation_policy": {"mode": "tokens", "limit": max(1000, context // 16)},
        "supports_parallel_tool_calls": True,
        "context_window": context,
        "max_context_window": context,
        "auto_compact_token_limit": compact_at(context),
        "max_output_tokens": out_tokens(context),
        "effective_context_window_percent": 95,
        "experimental_supported_tools": [],
        "input_modalities": ["text", "image"] if images else ["text"],
    }
