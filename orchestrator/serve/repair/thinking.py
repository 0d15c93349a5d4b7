"""Whether the model thinks: the client's switches, the model's configured default, and who wins.

Pure functions, no I/O. llama-server reads ``enable_thinking`` only from ``chat_template_kwargs``
(``oaicompat_chat_params_parse`` in tools/server/server-common.cpp); the Qwen3.5 template's
generation prompt opens ``<think>`` unless it is false. Each API says it its own way (chat
``enable_thinking`` / ``reasoning_effort``, Anthropic ``thinking.type``, Responses
``reasoning.effort``, Ollama ``think``); the model's ``thinking`` key in models.yaml is the default.

Who wins (models.yaml ``client_thinking``): an explicit switch from the client (``enabled`` or
``disabled``, ``enable_thinking``, ``reasoning.effort``) always does. A client's *default*, Anthropic
``thinking: {"type": "adaptive"}`` (Claude Code sends it on every request, whatever the model),
turns thinking on only when the model has no ``thinking`` configured or sets ``client_thinking:
true``; otherwise the configured ``thinking`` wins (a model configured ``thinking: false`` stays off
under Claude Code).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.errors import ApiError

# The effort values OpenAI accepts (chat ``reasoning_effort``, Responses ``reasoning.effort``), and
# ``max``, the highest level in agent clients' menus (thinking on; a template that reads the effort
# gets it as sent); any other string turned thinking on without a word, so it is a 400 naming the field.
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
# Ollama's ``think`` levels (and ``max``): thinking on. Also honoured as a top-level ``think`` on /v1.
THINK_LEVELS = ("low", "medium", "high", "max")


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, message, param=param)


def check_effort(effort: Any, param: str) -> None:
    """400 naming ``param`` unless ``effort`` is None or one of :data:`EFFORTS`."""
    if effort is not None and (not isinstance(effort, str) or effort not in EFFORTS):
        raise _bad(f"{param!r} must be one of {', '.join(EFFORTS)} (got {effort!r})", param)


def chat_thinking(body: dict[str, Any], default: bool | None, add: Callable[[str], Any]) -> dict[str, Any] | None:
    """Return a new ``chat_template_kwargs`` to set, or None when it stays as is.

    llama-server reads ``enable_thinking`` only from ``chat_template_kwargs``
    (``oaicompat_chat_params_parse`` in tools/server/server-common.cpp) and ignores a top-level
    one; explicit ``chat_template_kwargs`` from the client win over a top-level value.
    """
    ctk = body.get("chat_template_kwargs")
    if ctk is not None and not isinstance(ctk, dict):
        raise _bad("'chat_template_kwargs' must be an object", "chat_template_kwargs")
    ctk = ctk or {}
    if "enable_thinking" in ctk and not isinstance(ctk["enable_thinking"], bool):
        raise _bad("chat_template_kwargs.enable_thinking must be true or false", "chat_template_kwargs.enable_thinking")
    effort = body.get("reasoning_effort")
    # false, 5 or "ultra" said nothing llama-server reads, and skipping the model's default for it
    # turned thinking on for a model configured thinking: false
    check_effort(effort, "reasoning_effort")
    switches = {k: _top_switch(body[k], k) for k in ("enable_thinking", "think") if body.get(k) is not None}
    if len(set(switches.values())) > 1:
        raise _bad("'think' and 'enable_thinking' disagree; send one of them", "think")
    if "enable_thinking" in body and body["enable_thinking"] is None:
        raise _bad("'enable_thinking' must be true or false", "enable_thinking")
    if switches:
        top = next(iter(switches.values()))
        add("thinking_moved")
        if "enable_thinking" in ctk:
            return dict(ctk)  # the client's explicit kwargs win; only the top-level key goes
        return {**ctk, "enable_thinking": top}
    if default is not None and "enable_thinking" not in ctk and effort is None:
        add("thinking_default")
        return {**ctk, "enable_thinking": default}
    return None


def _top_switch(value: Any, key: str) -> bool:
    """A top-level ``enable_thinking`` (true or false) or Ollama-style ``think`` (also a level) as
    the ``enable_thinking`` it means.

    Raises:
        ApiError: 400 naming ``key`` for anything else (a switch llama-server would ignore).
    """
    if isinstance(value, bool):
        return value
    if key == "think" and value in THINK_LEVELS:
        return True
    levels = f", or one of {', '.join(map(repr, THINK_LEVELS))}" if key == "think" else ""
    raise _bad(f"{key!r} must be true or false{levels}", key)


def chat_thinking_on(body: dict[str, Any]) -> bool:
    ctk = body.get("chat_template_kwargs")
    if isinstance(ctk, dict) and isinstance(ctk.get("enable_thinking"), bool):
        return bool(ctk["enable_thinking"])
    return body.get("reasoning_effort") != "none"
