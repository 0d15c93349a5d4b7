"""Cache-stable history: the Qwen3.5 template rewritten to take Qwen3.6's ``preserve_thinking``
renders every earlier assistant turn the same way whether or not a user message follows it, so
each request's prompt starts with the previous one's (rendered in-process, no server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.models.runtime import render_template
from orchestrator.models.stable_template import cache_stable

TOOLS = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture(scope="module")
def qwen35(pinned_source: Path) -> str:
    return (pinned_source / "models/templates/Qwen3.5-4B.jinja").read_text()


def _chain(user2: bool) -> list[dict[str, object]]:
    msgs: list[dict[str, object]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Fix main.py"},
        {"role": "assistant", "content": "", "reasoning_content": "I should read it.",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": {}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "print(1)"},
        {"role": "assistant", "content": "Fixed.", "reasoning_content": "It was a typo."},
    ]  # fmt: skip
    return [*msgs, {"role": "user", "content": "Now add a test"}] if user2 else msgs


def _render(template: str, messages: list[dict[str, object]], **kwargs: object) -> str:
    return render_template(template, messages, tools=TOOLS, add_generation_prompt=False, kwargs=kwargs or None)


@pytest.mark.native
def test_the_stock_template_rewrites_the_tool_chain_when_the_user_speaks_again(qwen35: str) -> None:
    before, after = _render(qwen35, _chain(False)), _render(qwen35, _chain(True))
    assert not after.startswith(before)  # the reasoning of the chain's turns is gone from the history


@pytest.mark.native
def test_the_rewritten_template_keeps_every_turn_as_it_was(qwen35: str) -> None:
    stable = cache_stable(qwen35)
    assert stable is not None and stable.text is not None and stable.kwargs == '{"preserve_thinking": true}'
    before = _render(stable.text, _chain(False), preserve_thinking=True)
    after = _render(stable.text, _chain(True), preserve_thinking=True)
    assert after.startswith(before) and "I should read it." in after and "It was a typo." in after
    # without the switch the rewritten template renders exactly as the GGUF's own
    assert _render(stable.text, _chain(True)) == _render(qwen35, _chain(True))


def test_templates_with_the_switch_or_without_the_pattern() -> None:
    native = cache_stable("{% if preserve_thinking %}...{% endif %}")
    assert native is not None and native.text is None  # Qwen3.6: the kwarg alone
    assert cache_stable("{{ messages }}") is None and cache_stable(None) is None
