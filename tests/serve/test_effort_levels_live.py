"""Reasoning effort a chat template refuses (case B71), through the endpoint on a real llama-server.

The model is the tiny echo model launched with a copy of its own template that checks
``reasoning_effort`` against a Qwen3.8-style vocabulary (``low``, ``medium``, ``xhigh``) and
raises for anything else. Before, ``high``, ``minimal``, ``max``, the kwargs form and Responses'
``reasoning.effort: high`` were a 400 naming ``messages`` (the template's exception); now the
levels are learned from the replica and each request goes to the nearest accepted level.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import Stack, real_stack

pytestmark = [pytest.mark.native, pytest.mark.slow]

ACCEPTED = ("low", "medium", "xhigh")
CHECK = (
    "{%- if reasoning_effort is defined and reasoning_effort is not none and reasoning_effort not in "
    + json.dumps(list(ACCEPTED))
    + " %}{{- raise_exception('Invalid reasoning_effort: ' ~ reasoning_effort) }}{%- endif %}\n"
)
ANTHROPIC = {"Content-Type": "application/json", "anthropic-version": "2023-06-01"}


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path, pinned_source: Path
) -> Iterator[Stack]:
    from orchestrator.models.tiny import TEMPLATE_FILE

    folder = tmp_path_factory.mktemp("effort")
    template = folder / "qwen38-effort.jinja"
    template.write_text(CHECK + (pinned_source / TEMPLATE_FILE).read_text(encoding="utf-8"), encoding="utf-8")
    model = {"name": "demo", "parallel": 1, "ctx_size": 2048, "extra_args": ["--chat-template-file", str(template)]}
    s = real_stack(folder, echo_model, bin_info, models=[model])
    yield s
    s.close()


def _sent(stack: Stack, path: str) -> dict[str, Any]:
    """The last body the proxy sent to ``path`` (the probe's ``/apply-template`` bodies aside)."""
    return stack.recorder.bodies(path)[-1]


def _post(stack: Stack, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(stack.url + path, json=body, headers=headers, timeout=120)


CHAT = {"model": "demo", "max_tokens": 8, "messages": [{"role": "user", "content": "U1"}]}


@pytest.mark.parametrize(
    ("extra", "field", "expect"),
    [
        ({"reasoning_effort": "high"}, "reasoning_effort", "xhigh"),
        ({"reasoning_effort": "minimal"}, "reasoning_effort", "low"),
        ({"reasoning_effort": "max"}, "reasoning_effort", "xhigh"),
        ({"reasoning_effort": "xhigh"}, "reasoning_effort", "xhigh"),
        ({"reasoning_effort": "low"}, "reasoning_effort", "low"),
        ({"chat_template_kwargs": {"reasoning_effort": "high"}}, "chat_template_kwargs", "xhigh"),
    ],
)
def test_chat_effort_goes_to_the_nearest_level_the_template_accepts(
    stack: Stack, extra: dict[str, Any], field: str, expect: str
) -> None:
    r = _post(stack, "/v1/chat/completions", {**CHAT, **extra})
    assert r.status_code == 200, r.text
    sent = _sent(stack, "/v1/chat/completions")
    level = sent["chat_template_kwargs"]["reasoning_effort"] if field == "chat_template_kwargs" else sent[field]
    assert level == expect


def test_responses_and_messages_efforts_are_answered(stack: Stack) -> None:
    body = {"model": "demo", "input": "U1", "max_output_tokens": 8, "reasoning": {"effort": "high"}}
    r = _post(stack, "/v1/responses", body)
    assert r.status_code == 200, r.text
    assert _sent(stack, "/v1/responses")["reasoning"]["effort"] == "xhigh"
    body = {**CHAT, "output_config": {"effort": "high"}, "thinking": {"type": "adaptive"}}
    r = _post(stack, "/v1/messages", body, ANTHROPIC)
    assert r.status_code == 200, r.text
    assert r.json()["type"] == "message"


def test_the_mapping_is_counted_and_sent_as_the_accepted_level(stack: Stack) -> None:
    from test_proxy_faults import metric

    before = metric(stack, "orchestrator_repairs_total", kind="reasoning_effort_mapped", model="demo") or 0.0
    prompt = {"model": "demo", "messages": CHAT["messages"], "reasoning_effort": "high"}
    rendered = _post(stack, "/apply-template", prompt)
    assert rendered.status_code == 200, rendered.text  # the prompt a chat with that effort gets
    r = _post(stack, "/v1/chat/completions", {**CHAT, "reasoning_effort": "max"})
    assert r.status_code == 200, r.text
    after = metric(stack, "orchestrator_repairs_total", kind="reasoning_effort_mapped", model="demo")
    assert after == before + 2


def test_an_effort_off_the_scale_is_refused_naming_the_client_field(stack: Stack) -> None:
    r = _post(stack, "/v1/chat/completions", {**CHAT, "chat_template_kwargs": {"reasoning_effort": "turbo"}})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "chat_template_kwargs"
    assert "low, medium, xhigh" in error["message"]
    r = _post(stack, "/v1/responses", {"model": "demo", "input": "U1", "reasoning": {"effort": "ultra"}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "reasoning.effort"
