"""Anthropic's ``max_tokens: 0`` cache pre-warm (``orchestrator.serve.anthropic.prewarm``), on literals (B70)."""

from __future__ import annotations

import pytest

from orchestrator.errors import ApiError
from orchestrator.serve.anthropic import prewarm

BODY = {"model": "demo", "max_tokens": 0, "messages": [{"role": "user", "content": "warmup"}]}


def test_a_prewarm_asks_for_one_token_and_answers_none() -> None:
    assert prewarm.request(BODY) == {**BODY, "max_tokens": 1}
    assert prewarm.request({**BODY, "max_tokens": 5}) is None and prewarm.request({**BODY, "max_tokens": False}) is None
    message = {"type": "message", "content": [{"type": "text", "text": "x"}], "stop_reason": "end_turn",
               "usage": {"input_tokens": 9, "output_tokens": 1}}  # fmt: skip
    prewarm.answer(message)
    assert message["content"] == [] and message["stop_reason"] == "max_tokens"
    assert message["usage"] == {"input_tokens": 9, "output_tokens": 0}


@pytest.mark.parametrize("extra", [{"stream": True}, {"thinking": {"type": "enabled", "budget_tokens": 1024}}])
def test_a_streamed_or_thinking_prewarm_is_refused(extra: dict[str, object]) -> None:
    with pytest.raises(ApiError) as err:
        prewarm.request({**BODY, **extra})
    assert (err.value.status, err.value.param) == (400, "max_tokens")
