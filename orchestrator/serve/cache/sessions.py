"""Prompt-cache hits per client session, for ``/status`` (each model's ``kv.sessions``) and
``orchestrator status``.

A session is the client's session key (Claude Code's session id in ``metadata.user_id``, OpenAI's
``prompt_cache_key``; ``Adapter.session_key``), else the opening of its messages (``session_of``),
else ``-``. Every answer's ``timings`` add its prompt tokens taken from the cache (``cache_n``) and
processed (``prompt_n``). Only the ``MAX_SESSIONS`` most recently seen sessions of a model are
kept; ``rows`` shows the ``SHOWN`` latest.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

MAX_SESSIONS = 256  # per model: the least recently seen is forgotten first
SHOWN = 8  # sessions per model in /status


@dataclass
class SessionHits:
    """One session's counters: requests, prompt tokens taken from the cache and processed."""

    requests: int = 0
    cached: int = 0
    processed: int = 0
    last_cached: int = 0
    last_processed: int = 0
    seen: float = 0.0  # wall clock of the last answer

    def row(self, session: str) -> dict[str, Any]:
        total = self.cached + self.processed
        return {
            "session": session,
            "requests": self.requests,
            "cached_tokens": self.cached,
            "processed_tokens": self.processed,
            "hit_rate": round(self.cached / total, 3) if total else None,
            "last": {"cached_tokens": self.last_cached, "processed_tokens": self.last_processed},
            "seen": self.seen,
        }


class Sessions:
    """Cache hits per model and session (see the module)."""

    def __init__(self) -> None:
        self._models: dict[str, OrderedDict[str, SessionHits]] = {}

    def record(self, model: str, session: str, timings: dict[str, Any]) -> None:
        """Add an answer's ``timings`` (``cache_n``, ``prompt_n``) to ``session`` of ``model``."""
        cached, processed = timings.get("cache_n", 0), timings.get("prompt_n", 0)
        if not isinstance(cached, int) or not isinstance(processed, int):
            return
        table = self._models.setdefault(model, OrderedDict())
        hits = table.pop(session, None) or SessionHits()
        table[session] = hits
        if len(table) > MAX_SESSIONS:
            table.popitem(last=False)
        hits.requests += 1
        hits.cached += max(0, cached)
        hits.processed += max(0, processed)
        hits.last_cached, hits.last_processed = max(0, cached), max(0, processed)
        hits.seen = time.time()

    def rows(self, model: str) -> list[dict[str, Any]]:
        """The ``SHOWN`` most recently seen sessions of ``model``, latest first."""
        table = self._models.get(model) or OrderedDict()
        return [hits.row(session) for session, hits in list(reversed(table.items()))[:SHOWN]]

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        """``rows`` of every model with a session (the console's poll)."""
        return {model: self.rows(model) for model, table in self._models.items() if table}


def session_of(key: str | None, body: dict[str, Any]) -> str:
    """The session a request counts under: its client ``key``, else the opening of its ``messages``
    (``p:`` and a digest of the system prompt and the messages up to the first user message: which
    conversation it is), else ``-``. Reads the body only: nothing is rendered."""
    messages = body.get("messages")
    if key is not None:
        return key
    if not isinstance(messages, list):
        return "-"
    return "p:" + opening_digest(messages, body.get("system"))[:12]  # Anthropic's system prompt is beside them


def opening_digest(messages: list[Any], *beside: Any) -> str:
    """A digest of a conversation's opening: its messages up to the first user message (and what
    stands ``beside`` them, such as Anthropic's ``system``). The same for every request of one
    conversation, different for another conversation on the same system prompt."""
    first = next((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user"), len(messages))
    opening = [*beside, messages[: first + 1]] if beside else messages[: first + 1]
    return hashlib.sha256(json.dumps(opening, sort_keys=True, default=str).encode()).hexdigest()[:16]


CONVERSATIONS = 4096  # conversations whose model is remembered (the least recently seen go first)


class ConversationModels:
    """Which model each recent conversation went to, so that a request without ``model`` (the
    Codex app sends most follow-ups so) goes on with its conversation's model, not a guess that
    would swap models or lose its prompt cache. A conversation is known by each of its keys
    (:func:`conversation_keys`); only the ``CONVERSATIONS`` most recently seen are kept."""

    def __init__(self) -> None:
        self._models: OrderedDict[str, str] = OrderedDict()

    def remember(self, keys: list[str], model: str) -> None:
        """``model`` served the conversation known by ``keys``."""
        for key in keys:
            self._models.pop(key, None)
            self._models[key] = model
        while len(self._models) > CONVERSATIONS:
            self._models.popitem(last=False)

    def model_of(self, keys: list[str]) -> str | None:
        """The model the conversation known by ``keys`` (the first one known wins) went to, or None."""
        return next((self._models[k] for k in keys if k in self._models), None)


def conversation_keys(session: str | None, body: dict[str, Any]) -> list[str]:
    """The keys a conversation is known by: the client's ``session`` key (``Adapter.session_key``),
    then a digest of its opening, read from any API's body (chat's and Anthropic's ``messages``,
    Responses' ``input``, with the system prompt beside them) and normalised to roles and text,
    so that a first turn sent as a string and its follow-up sent as items agree."""
    keys = [session] if session is not None else []
    turns = _turns(body)
    if turns:
        keys.append("o:" + hashlib.sha256(json.dumps(turns).encode()).hexdigest()[:16])
    return keys


def _turns(body: dict[str, Any]) -> list[list[str]]:
    """The opening of a conversation as ``[role, text]`` pairs: the system prompt (Anthropic's
    ``system``, Responses' ``instructions``, leading system and developer messages) and each
    message up to and including the first user message; empty when it has no user message."""
    items = body.get("messages")
    if items is None:
        items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list):
        return []
    turns = [["system", _text(beside)] for beside in (body.get("system"), body.get("instructions")) if beside]
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("role"), str):
            continue  # a tool call or its output: not part of an opening
        role = "system" if item["role"] == "developer" else item["role"]
        turns.append([role, _text(item.get("content"))])
        if role == "user":
            return turns
    return []


def _text(content: Any) -> str:
    """The text of a message's content: a string, or its parts' ``text`` joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""
