"""The thinking-only stream repair parses only the events that can matter: until something visible
went out, an event that may show something or end the stream; a reasoning delta is relayed as it
came. Checked on llama-server's own bytes (the pinned server, thinking on, the demo model) and on
any text a model may write."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.serve.repair import thinking_only
from orchestrator.serve.repair.thinking_only import ThinkingOnlyStream

# data lines as the pinned llama-server streams them (curl against llama-server, thinking on)
CHAT_REASONING = b'{"choices":[{"finish_reason":null,"index":0,"delta":{"reasoning_content":"urn"}}],"created":1796407876,"id":"chatcmpl-eGV","model":"demo","system_fingerprint":"b0-b11434","object":"chat.completion.chunk"}'  # noqa: E501
CHAT_ROLE = b'{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1,"id":"c","model":"demo","object":"chat.completion.chunk"}'  # noqa: E501
MESSAGES_THINKING = b'{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"urn"}}'
MESSAGES_START = b'{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}'
MESSAGES_SIGNATURE = b'{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":""}}'
MESSAGES_MAX = (
    b'{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":4}}'
)
RESPONSES_REASONING = b'{"type":"response.reasoning_text.delta","delta":"urn","item_id":"rs_1hH"}'
RESPONSES_DONE = b'{"type":"response.output_item.done","item":{"id":"rs_1","summary":[],"type":"reasoning","content":[{"text":"lyurn","type":"reasoning_text"}],"encrypted_content":""}}'  # noqa: E501
QUIET = {
    "chat": [CHAT_REASONING],
    "messages": [MESSAGES_THINKING, MESSAGES_START, MESSAGES_SIGNATURE, MESSAGES_MAX],
    "responses": [RESPONSES_REASONING, RESPONSES_DONE],
}


def _visible_or_end(api: str, text: str) -> list[dict[str, Any]]:
    """Events of ``api`` that show ``text`` (a tool call when it is blank) or end the stream normally."""
    if api == "chat":
        return [
            {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "f"}}]}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        ]
    if api == "messages":
        return [
            {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": text}},
            {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": text}},
            {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "name": "f"}},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}},
        ]
    return [
        {"type": "response.output_text.delta", "item_id": "msg_1", "delta": text},
        {"type": "response.output_item.added", "item": {"type": "function_call", "name": "f"}},
        {"type": "response.completed", "response": {"status": "completed", "output": []}},
    ]


def test_reasoning_and_bookkeeping_events_are_relayed_unparsed_until_something_shows() -> None:
    for api, events in QUIET.items():
        stream = ThinkingOnlyStream(None, api)
        for raw in events:
            assert not stream.needs_parse(raw), (api, raw)
            assert stream.repair(json.loads(raw)) == (json.loads(raw), [])  # parsing it would change nothing
    assert ThinkingOnlyStream(None, "chat").needs_parse(CHAT_ROLE)  # "content": null: parsed, shows nothing


@given(text=st.text(min_size=1).filter(lambda t: t.strip() != ""), spaced=st.booleans())
def test_every_event_that_shows_or_ends_is_parsed_whatever_its_text_and_spacing(text: str, spaced: bool) -> None:
    separators = (", ", ": ") if spaced else (",", ":")
    for api in thinking_only.SIGNS:
        for event in _visible_or_end(api, text):
            raw = json.dumps(event, separators=separators, ensure_ascii=False).encode()
            assert ThinkingOnlyStream(None, api).needs_parse(raw), (api, raw)
            assert thinking_only._shows(api, event) or thinking_only._ends_normally(api, event), (api, event)


@given(text=st.text(), spaced=st.booleans())
def test_a_reasoning_delta_is_parsed_only_when_its_whole_text_is_a_signs_word(text: str, spaced: bool) -> None:
    """Generated text cannot fake a key or a value around it (its quotes are escaped): only a delta
    whose text is exactly ``content`` or ``stop`` (say) costs a needless parse."""
    separators = (", ", ": ") if spaced else (",", ":")
    deltas = {
        "chat": {"choices": [{"index": 0, "delta": {"reasoning_content": text}, "finish_reason": None}]},
        "messages": {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": text}},
        "responses": {"type": "response.reasoning_text.delta", "item_id": "rs_1", "delta": text},
    }
    for api, delta in deltas.items():
        words = {sign.decode().strip('"') for sign in thinking_only.SIGNS[api]}
        for ascii_only in (True, False):
            raw = json.dumps(delta, separators=separators, ensure_ascii=ascii_only).encode()
            assert ThinkingOnlyStream(None, api).needs_parse(raw) == (text in words), (api, raw)
