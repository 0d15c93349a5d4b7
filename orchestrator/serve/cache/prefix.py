"""Prompts as tokens, in-process: warm prefixes for ``KvPersistence`` and the prompt of a chat
request for prefix affinity.

Both render with the GGUF's own chat template and tokenize with its own vocabulary through the
in-process runtime (``orchestrator.models.runtime``, our libllama), after the same request
repair the proxy applies, so no round trip to llama-server is needed.

A warm prefix is a system message. Its tokens are what every chat request starting with that
system message shares: the conversation is rendered with two different user messages and
the longest common token prefix is kept (it ends inside the user turn's header, so a request
with any user message extends it exactly, as a hybrid model's cache needs).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.config.kv_types import WarmPrefixFile
from orchestrator.config.model_paths import resolve_file
from orchestrator.config.schema import Config, ModelConfig
from orchestrator.errors import UserError
from orchestrator.models.runtime import load_vocab, render_chat
from orchestrator.serve.cache.chat_view import template_messages
from orchestrator.serve.repair.chat import RepairPolicy, repair_request
from orchestrator.supervise.affinity import common_prefix

_PROBES = ("a", "b")  # two user messages that share nothing: their renders part where the user text starts


def policy_for(model: ModelConfig) -> RepairPolicy:
    """The model's request-repair policy (as the proxy builds it)."""
    return RepairPolicy(
        system_messages=model.system_messages,
        multimodal=model.multimodal,
        fetch_media_urls=model.fetch_media_urls,
        thinking_default=model.thinking,
        client_thinking=model.client_thinking,
        stable_system=model.cache.stable_system,
    )


def chat_tokens(gguf: Path, body: dict[str, Any], policy: RepairPolicy) -> list[int]:
    """The prompt tokens llama-server will build for chat ``body`` (repaired with ``policy``).

    Raises:
        ApiError: the repair refused the body (400).
        UserError: the template refused it or the GGUF has none (``ChatTemplateError``).
    """
    return prompt_tokens(gguf, repair_request(body, policy).body)


def prompt_tokens(gguf: Path, chat: dict[str, Any], launch: Launched | None = None) -> list[int]:
    """The prompt tokens llama-server will build for the chat request ``chat`` (an already
    repaired body, as a route adapter's ``chat_request`` gives it), with the template the server
    was ``launch``-ed with (``--chat-template-file``, ``--chat-template-kwargs``) when it has one.

    Raises:
        UserError: the template refused it or the GGUF has none (``ChatTemplateError``).
    """
    kwargs = chat.get("chat_template_kwargs") or {}
    thinking = kwargs.get("enable_thinking") if isinstance(kwargs, dict) else None
    text = render_chat(
        gguf,
        template_messages(chat["messages"]),
        enable_thinking=thinking if isinstance(thinking, bool) else None,
        tools=chat.get("tools"),
        template=launch.template() if launch else None,
        kwargs=launch.kwargs() if launch else None,
    )
    return load_vocab(gguf).tokenize(text)


class Launched:
    """The chat template a server was launched with (``launch.template``): its file and kwargs."""

    def __init__(self, template_file: Path | None, template_kwargs: str | None) -> None:
        self.template_file, self.template_kwargs = template_file, template_kwargs

    def template(self) -> str | None:
        return _read(self.template_file) if self.template_file else None

    def kwargs(self) -> dict[str, Any] | None:
        return json.loads(self.template_kwargs) if self.template_kwargs else None


@functools.lru_cache(maxsize=8)
def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def warm_text(item: str | WarmPrefixFile, config_dir: Path) -> str:
    """The system message of one ``warm_prefixes`` entry.

    Raises:
        UserError: the file cannot be read as UTF-8 text.
    """
    if isinstance(item, str):
        return item
    path = resolve_file(item.file, config_dir)
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"warm prefix file {path}: {err}", hint="fix warm_prefixes in models.yaml") from None


def warm_tokens_for(config: Config, gguf_of: Callable[[ModelConfig], Path]) -> Callable[[ModelConfig], list[list[int]]]:
    """``KvPersistence``'s ``warm_tokens``: a model's warm prefixes as token lists (blocking).

    Args:
        config: for the folder relative ``file:`` entries resolve against.
        gguf_of: the GGUF a model runs (the launch plan's ``-m``).
    """

    def warm_tokens(model: ModelConfig) -> list[list[int]]:
        gguf = gguf_of(model)
        policy = policy_for(model)
        out = []
        for item in model.warm_prefixes:
            system = {"role": "system", "content": warm_text(item, config.config_dir)}
            a, b = (chat_tokens(gguf, {"messages": [system, {"role": "user", "content": u}]}, policy) for u in _PROBES)
            out.append(a[: common_prefix(a, b)])
        return out

    return warm_tokens
