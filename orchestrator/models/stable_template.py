"""A chat template that renders earlier turns the same way on every request: the cache-stable history.

The Qwen3.5/3.6 templates find the last real user message and render the assistant turns before
it without their reasoning (and without the think block), the turns after it with them. So each
new user message re-renders every assistant turn of the tool chain before it, and the prompt
stops being a prefix of the one the slot holds: measured on the demo model through llama-server,
the user turn after a two-call tool chain re-processed 813 of 1,306 prompt tokens. Keeping the
reasoning of every turn (Qwen3.6's ``preserve_thinking`` switch) renders each turn once and for
all: 51 of 1,368 with the reasoning sent back, 26 of 1,318 with it dropped (the turn whose
reasoning the client dropped is re-read from its think block on, its answer only).

:func:`cache_stable` says how a template gets there: it has the ``preserve_thinking`` switch
itself (Qwen3.6), or it is a Qwen3.5-style template whose history test can take the same switch
(rewritten here, launched with ``--chat-template-file``), or neither (None: it stays as it is).
The cost is context: every earlier turn keeps its reasoning.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

PRESERVE = "preserve_thinking"
# the Qwen3.5 template's test of whether an assistant turn comes after the last user query
_HISTORY_TEST = "{%- if loop.index0 > ns.last_query_index %}"
_PRESERVING_TEST = "{%- if loop.index0 > ns.last_query_index or (preserve_thinking is defined and preserve_thinking) %}"


@dataclass(frozen=True)
class StableTemplate:
    """How to launch a template cache-stable: ``text`` (a rewritten template to pass with
    ``--chat-template-file``; None: the GGUF's own has the switch) and the switch to turn on."""

    text: str | None
    kwargs: str = '{"' + PRESERVE + '": true}'

    def file_name(self) -> str:
        """A name for ``text`` that changes with it (the file is shared by every launch)."""
        return "preserve-" + hashlib.sha256((self.text or "").encode()).hexdigest()[:16] + ".jinja"


def cache_stable(template: str | None) -> StableTemplate | None:
    """How ``template`` renders earlier turns the same on every request, or None when it cannot."""
    if not template:
        return None
    if PRESERVE in template:
        return StableTemplate(None)
    if template.count(_HISTORY_TEST) == 1:
        return StableTemplate(template.replace(_HISTORY_TEST, _PRESERVING_TEST))
    return None
