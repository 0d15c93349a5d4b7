"""Anthropic's cache pre-warm: ``max_tokens: 0`` processes the prompt, caches it and answers nothing.

Anthropic documents ``max_tokens: 0`` as the way to load a prompt into the cache before the user
asks: the answer is ``content: []``, ``stop_reason: "max_tokens"`` and 0 output tokens. The pinned
llama-server cannot be asked for that: it checks the token budget only once a token was generated
(``server-context.cpp``), so a limit of 0 still decodes and returns one token. The request goes
upstream with ``max_tokens: 1`` instead (the prompt is processed and stays in the slot and the
prompt cache, which is the point), and the one token is dropped from the answer. A stream or
extended thinking (``thinking.type: "enabled"``) cannot be pre-warmed: Anthropic refuses them with
``max_tokens: 0`` too, so they are a 400 naming ``max_tokens``.
"""

from __future__ import annotations

from typing import Any

from orchestrator.errors import ApiError


def wanted(body: dict[str, Any]) -> bool:
    """Whether ``body`` (the client's) asks for a pre-warm: ``max_tokens`` is the integer 0."""
    value = body.get("max_tokens")
    return type(value) is int and value == 0


def request(body: dict[str, Any]) -> dict[str, Any] | None:
    """The body to send for a pre-warm (``max_tokens: 1``), or None when ``body`` is no pre-warm.

    Raises:
        ApiError: 400 naming ``max_tokens`` for a streamed pre-warm or one with extended thinking.
    """
    if not wanted(body):
        return None
    if body.get("stream") is True:
        raise ApiError(
            400, "max_tokens: 0 (a cache pre-warm) cannot be streamed; send stream: false", param="max_tokens"
        )
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        raise ApiError(400, "max_tokens: 0 (a cache pre-warm) cannot be used with thinking enabled", param="max_tokens")
    return {**body, "max_tokens": 1}


def answer(message: dict[str, Any]) -> None:
    """Make ``message`` (the whole answer to a pre-warm) say that nothing was generated."""
    message["content"] = []
    message["stop_reason"] = "max_tokens"
    message["stop_sequence"] = None
    usage = message.get("usage")
    if isinstance(usage, dict):
        usage["output_tokens"] = 0
