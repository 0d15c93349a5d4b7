"""Prompt-cache hits per client session, for ``/status`` (each model's ``kv.sessions``) and
``orchestrator status``, and the system-prompt line that broke a session's cache.

A session is the client's session key (Claude Code's session id in ``metadata.user_id``, OpenAI's
``prompt_cache_key``; ``Adapter.session_key``), else the opening of its messages (``session_of``),
else ``-``. Every answer's ``timings`` add its prompt tokens taken from the cache (``cache_n``) and
processed (``prompt_n``). Only the ``MAX_SESSIONS`` most recently seen sessions of a model are
kept; ``rows`` shows the ``SHOWN`` latest.

A session's consecutive prompts are compared by their system prompt (``system_text``): when it
changed (a clock line that changes every request, a plugin rewriting it), everything after the
change is processed again. The row's ``cache_broken_by`` names the line, its number and the byte
offset where the two prompts part, how often it happened, and the log says so once per session
(models.yaml ``cache.stable_system`` moves clock lines out: ``orchestrator.serve.repair.clock``).
A conversation's opening is told without its clock lines, so it stays one session.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from orchestrator.serve.repair.clock import split_clock

log = logging.getLogger(__name__)
MAX_SESSIONS = 256  # per model: the least recently seen is forgotten first
SHOWN = 8  # sessions per model in /status
MAX_SYSTEM_CHARS = 1 << 16  # a system prompt is compared up to here (kept per session)
SHOWN_LINE_CHARS = 160  # of the line that broke a cache


@dataclass(frozen=True)
class Break:
    """Where a session's system prompt changed: the ``line`` (its new text) and its ``number``,
    the ``offset`` in bytes where the two prompts part."""

    line: str
    number: int
    offset: int

    def row(self, times: int) -> dict[str, Any]:
        return {"line": self.line, "line_number": self.number, "byte_offset": self.offset, "times": times}


@dataclass
class SessionHits:
    """One session's counters: requests, prompt tokens taken from the cache and processed."""

    requests: int = 0
    cached: int = 0
    processed: int = 0
    last_cached: int = 0
    last_processed: int = 0
    seen: float = 0.0  # wall clock of the last answer
    system: str | None = None  # the last request's system prompt (up to MAX_SYSTEM_CHARS)
    broken: Break | None = None  # the latest change of it
    breaks: int = 0  # requests whose system prompt differed from the one before

    def row(self, session: str) -> dict[str, Any]:
        total = self.cached + self.processed
        return {
            "cache_broken_by": self.broken.row(self.breaks) if self.broken is not None else None,
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

    def record(self, model: str, session: str, timings: dict[str, Any], system: str | None = None) -> None:
        """Add an answer's ``timings`` (``cache_n``, ``prompt_n``) to ``session`` of ``model``, and
        compare its ``system`` prompt (``system_text``) with the session's previous one."""
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
        if system is not None:
            self._compare(model, session, hits, system[:MAX_SYSTEM_CHARS])

    @staticmethod
    def _compare(model: str, session: str, hits: SessionHits, system: str) -> None:
        before, hits.system = hits.system, system
        if before is None or before == system:
            return
        change = first_change(before, system)
        if hits.broken is None:  # once per session: a clock breaks every request
            log.warning("%s: session %s: the system prompt changed at line %d (byte %d): %r; every token after it "
                        "is processed again (a clock? models.yaml cache.stable_system moves it out)",
                        model, session, change.number, change.offset, change.line)  # fmt: skip
        hits.broken, hits.breaks = change, hits.breaks + 1

    def rows(self, model: str) -> list[dict[str, Any]]:
        """The ``SHOWN`` most recently seen sessions of ``model``, latest first."""
        table = self._models.get(model) or OrderedDict()
        return [hits.row(session) for session, hits in list(reversed(table.items()))[:SHOWN]]

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        """``rows`` of every model with a session (the console's poll)."""
        return {model: self.rows(model) for model, table in self._models.items() if table}


def usage_counts(usage: Any) -> dict[str, int] | None:
    """``cache_n`` and ``prompt_n`` of an answer that carries ``usage`` but no ``timings`` (llama-server's
    Responses answers): OpenAI's and Responses' prompt tokens less their ``cached_tokens``, Anthropic's
    ``input_tokens`` (which leave out ``cache_read_input_tokens``); None when it says neither."""
    if not isinstance(usage, dict):
        return None
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    details = usage.get("prompt_tokens_details", usage.get("input_tokens_details"))
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if not isinstance(prompt, int):
        return None
    if isinstance(cached, int):
        return {"cache_n": cached, "prompt_n": max(0, prompt - cached)}
    read = usage.get("cache_read_input_tokens")
    return {"cache_n": read if isinstance(read, int) else 0, "prompt_n": prompt}


def first_change(before: str, after: str) -> Break:
    """Where ``after`` first differs from ``before``: its line there, the line number, the byte offset."""
    n = next((i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b), min(len(before), len(after)))
    start = after.rfind("\n", 0, n) + 1
    end = after.find("\n", n)
    line = after[start : end if end >= 0 else len(after)]
    return Break(line[:SHOWN_LINE_CHARS], after.count("\n", 0, n) + 1, len(after[:n].encode()))


def system_text(body: dict[str, Any]) -> str | None:
    """The system prompt of llama-server's chat, Messages or Responses ``body`` (a leading system
    message, ``system``, ``instructions``), or None when it has none."""
    messages = body.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[0], dict):
        first = messages[0]
        if first.get("role") in ("system", "developer"):
            return _system_of(first.get("content"))
    return _system_of(body.get("system")) if body.get("system") is not None else _system_of(body.get("instructions"))


def _system_of(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n\n".join(b["text"] for b in value if isinstance(b, dict) and isinstance(b.get("text"), str))
    return None


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
    return hashlib.sha256(json.dumps(_without_clock(opening), sort_keys=True, default=str).encode()).hexdigest()[:16]


def _without_clock(value: Any) -> Any:
    """``value`` with every text's clock lines (``repair.clock``) left out: a timestamp that changes
    on every request does not make each request a conversation of its own."""
    if isinstance(value, str):
        return split_clock(value)[0]
    if isinstance(value, list):
        return [_without_clock(v) for v in value]
    if isinstance(value, dict):
        return {k: _without_clock(v) for k, v in value.items()}
    return value


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
        keys.append("o:" + hashlib.sha256(json.dumps(_without_clock(turns)).encode()).hexdigest()[:16])
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
