"""Cache-stable prompts: where a late system message goes, and volatile lines that never reach the template.

Pure functions, no I/O. A coding agent's prompt grows turn by turn, and the prompt cache pays off
only when the tokens rendered for turn N+1 start with the tokens rendered for turn N. Two things
the clients send would break that if rendered naively:

* **A system message after the conversation started.** Claude Code 2.1.197 sends
  ``messages: [user, system]`` (its agent list as a trailing system message) and keeps it there on
  every later turn; Codex may send ``developer`` items between turns. The Qwen3.5 template refuses a
  system message after index 0, and moving it into the leading system prompt (``merge``) puts text
  in front of everything the previous turn cached whenever such a message is new, and ahead of the
  turns it followed. With ``system_messages: in_place`` (the default) it stays where it stands:
  wrapped as ``<system-reminder>`` (the convention Claude Code's own prompt explains to the model)
  and appended to the user turn it follows, or as a user turn of its own after an assistant or tool
  turn. Rendering then depends only on the conversation up to that point, never on what comes later.
* **Per-request lines at the top of the system prompt.** Claude Code's first system block is an
  ``x-anthropic-billing-header: cc_version=...; cc_entrypoint=...;`` line, with a ``cch=`` hash
  that changes on every request in newer versions. It means nothing to a local model; it is dropped
  (:func:`drop_volatile`) before rendering.
"""

from __future__ import annotations

import re

#: the header Claude Code puts first in its system prompt, with its ``key=value;`` attributes
_BILLING = re.compile(r"^x-anthropic-billing-header:(?:\s*[\w.-]+=[^;\n]*;)*[ \t]*\n?")


def reminder(text: str) -> str:
    """A late system message's text as it is rendered inside a user turn."""
    return f"<system-reminder>\n{text.strip()}\n</system-reminder>"


def drop_volatile(text: str) -> str:
    """``text`` without a leading ``x-anthropic-billing-header`` line (its ``cch=`` hash changes on
    every request); any other text is returned unchanged."""
    if not text.startswith("x-anthropic-billing-header:"):
        return text
    return _BILLING.sub("", text, count=1)


def append_text(content: object, text: str, part_type: str = "text") -> object:
    """A user turn's ``content`` with ``text`` appended: to a string after a blank line, to a list
    of content parts as one more part of ``part_type`` (the template joins parts with nothing)."""
    if isinstance(content, list):
        return [*content, {"type": part_type, "text": text}]
    base = content if isinstance(content, str) else ""
    return f"{base}\n\n{text}" if base.strip() else text
