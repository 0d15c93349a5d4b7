"""The request class the draft-length policy keeps its statistics under, read from a body.

Why these four features (each cheap: no tokenizer, one pass over text the proxy already holds):

* ``api`` (chat, completions, anthropic, responses, ...): agent clients and plain chat send
  different content under different APIs (Claude Code speaks Anthropic, Codex Responses), and a
  raw completion continues the prompt itself, where a chat answer starts after a template;
* ``tools``: requests that carry tool schemas are agent turns, whose answers are tool calls and
  code edits that copy context (high acceptance) as often as new prose;
* ``depth``: prompt size bucket (about 4 UTF-8 bytes per token): published acceptance falls with
  context depth (80-91% at 100 tokens, about 53% at 34K, parity with no drafting near 86K),
  and a verification step costs more at depth;
* ``content``: the script of the end of the last user text (``latin``, ``cjk``, ``cyrillic``,
  ``symbols`` for code and data with few letters), with ``+copy`` when the text's last
  ``COPY_CHARS`` characters already occur earlier in it (the answer is likely to repeat context:
  an edit of quoted code, a recall; where n-gram drafting pays): acceptance differs by content
  (0.93 on verbatim recall, about 0.55 on code and prose), and the answer usually continues in
  the script the request ends in.

Pure: imports nothing of the package but ``orchestrator.errors``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEPTHS = ((2048, "<2K"), (8192, "2K-8K"), (32768, "8K-32K"))  # upper bound (tokens) -> bucket
DEEPEST = "32K+"
COPY_CHARS = 12  # a tail this long seen earlier in the text marks copy content
TAIL_CHARS = 96  # characters of the last user text the content signal reads


@dataclass(frozen=True)
class RequestClass:
    """What the policy keys its statistics by (see the module docstring)."""

    api: str
    tools: bool
    depth: str
    content: str

    @property
    def key(self) -> str:
        return f"{self.api}/{'tools' if self.tools else 'no-tools'}/{self.depth}/{self.content}"


def depth_bucket(n_tokens: int) -> str:
    """The depth bucket of a prompt of about ``n_tokens`` tokens."""
    for bound, name in DEPTHS:
        if n_tokens < bound:
            return name
    return DEEPEST


def content_kind(text: str) -> str:
    """The script of ``text``'s last ``TAIL_CHARS`` characters: the most frequent of latin, cjk
    and cyrillic letters, or ``symbols`` when fewer than a fifth of the non-space characters are
    letters (code, data, numbers), ``empty`` without any."""
    tail = [c for c in text[-TAIL_CHARS:] if not c.isspace()]
    if not tail:
        return "empty"
    counts = {"latin": 0, "cjk": 0, "cyrillic": 0}
    letters = 0
    for c in tail:
        if not c.isalpha():
            continue
        letters += 1
        if c.isascii() or "\u00c0" <= c <= "\u024f":
            counts["latin"] += 1
        elif "\u4e00" <= c <= "\u9fff" or "\u3040" <= c <= "\u30ff" or "\uac00" <= c <= "\ud7af":
            counts["cjk"] += 1
        elif "\u0400" <= c <= "\u04ff":
            counts["cyrillic"] += 1
    if letters * 5 < len(tail):
        return "symbols"
    best = max(counts, key=lambda k: counts[k])
    return best if counts[best] else "other"


def _text_of(content: Any) -> str:
    """Text of a message content: a string, or the text parts of a list (any API's shape)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                value = part.get("text", part.get("content"))
                if isinstance(value, str | list):
                    parts.append(_text_of(value))
        return "".join(parts)
    return ""


def last_user_text(body: dict[str, Any]) -> str:
    """The text the answer will follow: a completion's prompt, or the last user turn of
    ``messages`` (chat, Anthropic) or ``input`` (Responses)."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], str):
        return prompt[-1]
    turns = body.get("messages", body.get("input"))
    if isinstance(turns, str):
        return turns
    if isinstance(turns, list):
        for turn in reversed(turns):
            if isinstance(turn, dict) and turn.get("role", "user") == "user":
                return _text_of(turn.get("content"))
    return ""


def prompt_bytes(value: Any) -> int:
    """UTF-8 bytes of every string in a body (keys excluded): the prompt's size, roughly."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "replace"))
    if isinstance(value, dict):
        return sum(prompt_bytes(v) for v in value.values())
    if isinstance(value, list):
        return sum(prompt_bytes(v) for v in value)
    return 0


def classify(api: str, body: dict[str, Any]) -> RequestClass:
    """The class of a request to ``api`` with JSON ``body``."""
    return RequestClass(
        api=api,
        tools=bool(body.get("tools")),
        depth=depth_bucket(prompt_bytes(body) // 4),
        content=content_signal(last_user_text(body)),
    )


def content_signal(text: str) -> str:
    """``content_kind`` of ``text``, with ``+copy`` when its tail repeats earlier text: the last
    ``COPY_CHARS`` characters, half as many for CJK text (a CJK character is about one token, a
    Latin one a quarter: 12 CJK characters missed a repeated 6-token passage on the test bed)."""
    kind = content_kind(text)
    n = COPY_CHARS // 2 if kind == "cjk" else COPY_CHARS
    body = text.rstrip()
    tail = body[-n:]
    if len(tail) == n and text.find(tail) < len(body) - n:
        return kind + "+copy"
    return kind
