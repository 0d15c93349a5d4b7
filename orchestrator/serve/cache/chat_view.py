"""A chat request as llama-server hands it to the template (pure, no I/O).

Each API's adapter turns its repaired body into a chat request (``Adapter.chat_request``; the
Anthropic and Responses conversions live in their folders' ``chat_view.py``);
:func:`template_messages` then does what llama-server does before the template sees a chat
request: tool-call ``arguments`` strings become objects.
"""

from __future__ import annotations

import json
from typing import Any


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` as llama-server hands them to the template: tool-call arguments parsed into
    objects (a string that is not a JSON object is kept as it is)."""
    out = []
    for msg in messages:
        calls = msg.get("tool_calls")
        if not calls:
            out.append(msg)
            continue
        parsed = []
        for call in calls:
            fn = dict(call.get("function") or {})
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except (TypeError, ValueError):
                args = fn.get("arguments")
            parsed.append({**call, "function": {**fn, "arguments": args}})
        out.append({**msg, "tool_calls": parsed})
    return out
