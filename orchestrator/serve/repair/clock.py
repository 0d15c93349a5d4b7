"""A clock in the system prompt, moved out of the cached prefix (models.yaml ``cache.stable_system``).

Pure functions, no I/O. Agents and their plugins (opencode memory plugins, many custom agents) write
the current time into the system prompt: ``updated 2026-09-14T10:00:01.123Z``, ``Current date and
time: Monday, September 14, 2026 at 10:00:01 AM UTC``. That line changes on every request, and
everything rendered after it (the rest of the system prompt, tools, every earlier turn) no longer
matches what the slot holds: measured through the endpoint, 66-71 % of each turn's prompt reused
instead of 99 %.

With ``cache.stable_system: true`` such lines leave the system prompt and go, in their order, into
one note at the end of the prompt, appended to the last user turn (a tool result counts: the Qwen
template renders it inside a user turn)::

    <system-reminder>
    <memory_metadata>updated 2026-09-14T10:09:01.456Z</memory_metadata>
    </system-reminder>

so the system prompt and every earlier turn render the same on every request, and only the latest
turn (which is new anyway) carries the time. The model still reads the current time, once, next
to the newest message; earlier turns are rendered without the note they had when they were the
latest (their own clock lines are gone with them: only the latest time is meaningful).

A line is volatile when it holds a time of day with seconds: an ISO-8601 date-time with seconds
(``2026-09-14T10:00:01``, ``2026-09-14 10:00:01``, with or without fraction and zone), or an
``hh:mm:ss`` time on a line that speaks of the date, time, clock or "now". A date-only line
(``Current date: 2026-09-14``) changes once a day: it stays where it is.
"""

from __future__ import annotations

import re
from typing import Any

from orchestrator.serve.repair.stability import append_text, reminder

#: an ISO-8601 date and time of day with seconds (``T`` or a space between them)
_ISO_SECONDS = re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}")
#: a clock time with seconds on a line that says it is the date/time
_CLOCK_LINE = re.compile(r"(?i)\b(?:date|time|clock|now|timestamp|updated)\b.*\b\d{1,2}:\d{2}:\d{2}\b")
KIND = "clock_moved"  # the repair kind (metrics): volatile lines moved to the end of the prompt


def is_volatile(line: str) -> bool:
    """Whether ``line`` holds a time of day with seconds (see the module docstring)."""
    return bool(_ISO_SECONDS.search(line) or _CLOCK_LINE.search(line))


def split_clock(text: str) -> tuple[str, list[str]]:
    """``(text without its volatile lines, those lines)``; ``text`` itself when it has none."""
    lines = text.split("\n")
    moved = [line.strip() for line in lines if is_volatile(line)]
    if not moved:
        return text, []
    return "\n".join(line for line in lines if not is_volatile(line)), moved


def note(lines: list[str]) -> str:
    """The moved lines as the note appended to the last user turn."""
    return reminder("\n".join(lines))


def _last_turn(messages: list[Any], roles: tuple[str, ...]) -> int | None:
    """Index of the last message of one of ``roles`` (a trailing assistant prefill is skipped)."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, dict) and m.get("role") in roles:
            return i
        if not (isinstance(m, dict) and m.get("role") == "assistant" and i == len(messages) - 1):
            return None
    return None


def chat(body: dict[str, Any]) -> dict[str, Any] | None:
    """A repaired chat body (one system message first, text content) with its clock moved, or None."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[0], dict):
        return None
    first = messages[0]
    if first.get("role") != "system" or not isinstance(first.get("content"), str):
        return None
    kept, moved = split_clock(first["content"])
    last = _last_turn(messages, ("user", "tool"))
    if not moved or last is None or last == 0:
        return None
    out = list(messages)
    out[0] = {**first, "content": kept}
    out[last] = {**messages[last], "content": append_text(messages[last].get("content"), note(moved))}
    return {**body, "messages": out}


def anthropic(body: dict[str, Any]) -> dict[str, Any] | None:
    """A repaired Anthropic body with the clock of its ``system`` (a string or text blocks) moved to
    the last user turn, or None."""
    system, messages = body.get("system"), body.get("messages")
    if not isinstance(messages, list):
        return None
    moved: list[str] = []
    if isinstance(system, str):
        kept, moved = split_clock(system)
        new_system: Any = kept
    elif isinstance(system, list):
        new_system = []
        for block in system:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                kept, lines = split_clock(block["text"])
                moved += lines
                block = {**block, "text": kept} if lines else block
            new_system.append(block)
    last = _last_turn(messages, ("user",))
    if not moved or last is None:
        return None
    out = list(messages)
    out[last] = {**messages[last], "content": append_text(messages[last].get("content"), note(moved))}
    return {**body, "system": new_system, "messages": out}


def responses(body: dict[str, Any]) -> dict[str, Any] | None:
    """A repaired Responses body with the clock of its ``instructions`` moved to the end of its
    ``input`` (a string, or the last user message or tool output item), or None."""
    instructions, items = body.get("instructions"), body.get("input")
    if not isinstance(instructions, str):
        return None
    kept, moved = split_clock(instructions)
    if not moved:
        return None
    text = note(moved)
    if isinstance(items, str):
        return {**body, "instructions": kept, "input": append_text(items, text)}
    if not isinstance(items, list) or not items or not isinstance(items[-1], dict):
        return None
    last = items[-1]
    if last.get("type", "message") == "message" and last.get("role") == "user":
        fixed = {**last, "content": append_text(last.get("content"), text, "input_text")}
    elif last.get("type") == "function_call_output" and isinstance(last.get("output"), str):
        fixed = {**last, "output": append_text(last["output"], text)}
    else:
        return None
    return {**body, "instructions": kept, "input": [*items[:-1], fixed]}
