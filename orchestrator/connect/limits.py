"""The limits an agent is told for a model: the longest answer it asks for and the prompt size at
which it compacts its history. One rule for every client and for the endpoint's own catalog."""

from __future__ import annotations


def out_tokens(context: int, max_output: int | None = None) -> int:
    """The longest answer a client asks for: ``max_output``, else a quarter of the window (agents
    send long prompts), at most 32,000."""
    return max_output or max(256, min(32000, context // 4))


def compact_at(context: int, max_output: int | None = None) -> int:
    """Prompt tokens at which an agent should compact its history: the window less the longest
    answer and a margin of 5% (a turn that starts below it still fits with its answer)."""
    return max(context // 2, context - out_tokens(context, max_output) - context // 20)
