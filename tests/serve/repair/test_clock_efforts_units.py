"""Clock lines moved out of the system prompt (``repair.clock``), reasoning effort onto a template's
levels (``repair.efforts``), an answer that ended inside its thinking (``repair.thinking_only``):
the pure rules, on literals. The live cases are in ``tests/serve/test_thinking_only_live.py``,
``test_effort_levels_live.py`` and ``test_clock_cache_live.py``."""

from __future__ import annotations

import pytest

from orchestrator.errors import ApiError
from orchestrator.serve.cache.sessions import Sessions, first_change, session_of, system_text
from orchestrator.serve.repair import clock, efforts, thinking_only

STAMP = "<memory_metadata>updated 2026-09-14T10:00:01.123Z</memory_metadata>"


@pytest.mark.parametrize(
    ("line", "volatile"),
    [
        (STAMP, True),
        ("Current date and time: Monday, September 14, 2026 at 10:00:01 AM UTC", True),
        ("Current date and time: 2026-09-14 10:00:01", True),
        ("now: 10:00:01", True),
        ("Current date: 2026-09-14", False),
        ("Today is Monday, September 14, 2026.", False),
        ("Use a 00:05 timeout for tests.", False),
    ],
)
def test_a_line_is_volatile_when_it_holds_a_time_with_seconds(line: str, volatile: bool) -> None:
    assert clock.is_volatile(line) is volatile


def test_chat_clock_moves_to_the_end_of_the_last_user_turn() -> None:
    body = {
        "messages": [
            {"role": "system", "content": f"P\n{STAMP}\nS0"},
            {"role": "user", "content": "U1"},
            {"role": "assistant", "content": "A1"},
            {"role": "user", "content": "U2"},
        ]
    }
    moved = clock.chat(body)
    assert moved is not None
    assert moved["messages"][0]["content"] == "P\nS0"
    assert moved["messages"][1]["content"] == "U1"
    assert moved["messages"][3]["content"] == f"U2\n\n<system-reminder>\n{STAMP}\n</system-reminder>"
    assert body["messages"][0]["content"] == f"P\n{STAMP}\nS0"  # never mutated


def test_a_date_only_system_prompt_is_left_alone() -> None:
    system = {"role": "system", "content": "P\nCurrent date: 2026-09-14"}
    body = {"messages": [system, {"role": "user", "content": "U"}]}
    assert clock.chat(body) is None


def test_anthropic_and_responses_clocks_move_too() -> None:
    msgs = {"system": [{"type": "text", "text": f"P\n{STAMP}"}], "messages": [{"role": "user", "content": "U1"}]}
    moved = clock.anthropic(msgs)
    assert moved is not None and moved["system"] == [{"type": "text", "text": "P"}]
    assert moved["messages"][0]["content"].endswith(f"{STAMP}\n</system-reminder>")
    resp = clock.responses({"instructions": "P\nCurrent date and time: 2026-09-14 10:00:01", "input": "U1"})
    assert resp is not None and resp["instructions"] == "P"
    assert resp["input"].startswith("U1\n\n<system-reminder>")
    items = {"instructions": f"P\n{STAMP}", "input": [{"type": "function_call_output", "call_id": "c", "output": "R"}]}
    moved_items = clock.responses(items)
    assert moved_items is not None and moved_items["input"][0]["output"].startswith("R\n\n<system-reminder>")


def test_efforts_go_to_the_nearest_accepted_level_a_tie_goes_up() -> None:
    accepted = ("low", "medium", "xhigh")
    assert [efforts.nearest(x, accepted) for x in efforts.LEVELS] == ["low", "low", "medium", "xhigh", "xhigh", "xhigh"]
    assert efforts.nearest("high", ("low", "medium")) == "medium"
    body = {"reasoning_effort": "high", "chat_template_kwargs": {"reasoning_effort": "minimal"}}
    assert efforts.map_body(body, accepted) == {
        "reasoning_effort": "xhigh",
        "chat_template_kwargs": {"reasoning_effort": "low"},
    }
    assert efforts.map_body({"reasoning": {"effort": "max"}}, accepted) == {"reasoning": {"effort": "xhigh"}}
    assert efforts.map_body({"reasoning_effort": "medium"}, accepted) is None
    assert efforts.map_body({"reasoning_effort": "none"}, accepted) is None
    assert efforts.map_body(body, None) is None  # every level renders: nothing to map


def test_an_effort_off_the_scale_is_refused_naming_the_field() -> None:
    with pytest.raises(ApiError) as err:
        efforts.map_body({"chat_template_kwargs": {"reasoning_effort": "turbo"}}, ("low", "medium"))
    assert err.value.status == 400 and err.value.param == "chat_template_kwargs"
    assert efforts.effort_field({"reasoning": {"effort": "high"}}) == "reasoning.effort"
    assert efforts.effort_field({"reasoning_effort": "none"}) is None


def _chat_answer(content: str, reasoning: str, finish: str = "stop") -> dict:
    message = {"role": "assistant", "content": content, "reasoning_content": reasoning}
    return {"choices": [{"index": 0, "finish_reason": finish, "message": message}], "usage": {"completion_tokens": 5}}


def test_chat_answer_that_ended_in_thinking_is_continued_with_its_reasoning() -> None:
    first = _chat_answer("", "let me think")
    assert thinking_only.chat_ended_in_thinking(first)
    assert not thinking_only.chat_ended_in_thinking(_chat_answer("", "r", finish="length"))
    assert not thinking_only.chat_ended_in_thinking(_chat_answer("hi", "r"))
    body = {"messages": [{"role": "user", "content": "U1"}], "max_tokens": 20}
    again = thinking_only.chat_continuation(body, first)
    assert again["messages"][-1] == {"role": "assistant", "content": "", "reasoning_content": "let me think"}
    assert again["continue_final_message"] == "content" and again["add_generation_prompt"] is False
    assert again["max_tokens"] == 15
    merged = thinking_only.chat_merged(first, _chat_answer("Answer", ""))
    assert merged["choices"][0]["message"]["reasoning_content"] == "let me think"
    assert merged["usage"]["completion_tokens"] == 10


def test_streams_that_show_nothing_end_incomplete_in_each_api() -> None:
    chat = thinking_only.ThinkingOnlyStream(None, "chat")
    reasoning = {"choices": [{"index": 0, "delta": {"reasoning_content": "r"}, "finish_reason": None}]}
    assert chat.repair(reasoning) == (reasoning, [])
    end, kinds = chat.repair({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    assert end["choices"][0]["finish_reason"] == "length" and kinds == [thinking_only.INCOMPLETE]
    shown = thinking_only.ThinkingOnlyStream(None, "chat")
    shown.repair({"choices": [{"index": 0, "delta": {"content": "A"}, "finish_reason": None}]})
    assert not shown.needs_parse(b"anything")
    msgs = thinking_only.ThinkingOnlyStream(None, "messages")
    end, _ = msgs.repair({"type": "message_delta", "delta": {"stop_reason": "end_turn"}})
    assert end["delta"]["stop_reason"] == "max_tokens"
    resp = thinking_only.ThinkingOnlyStream(None, "responses")
    end, _ = resp.repair({"type": "response.completed", "response": {"status": "completed"}})
    assert end["response"]["status"] == "incomplete"
    assert end["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_session_names_the_system_line_that_broke_its_cache() -> None:
    table = Sessions()
    before, after = f"P\n{STAMP}\nS0", f"P\n{STAMP.replace('00:01.123', '00:09.456')}\nS0"
    table.record("m", "k:a", {"cache_n": 0, "prompt_n": 100}, before)
    table.record("m", "k:a", {"cache_n": 10, "prompt_n": 90}, after)
    broken = table.rows("m")[0]["cache_broken_by"]
    assert broken["line_number"] == 2 and broken["line"].startswith("<memory_metadata>updated 2026-09-14T10:00:09")
    assert broken["byte_offset"] == len("P\n<memory_metadata>updated 2026-09-14T10:00:0") and broken["times"] == 1
    assert first_change("abc", "abc\nd").number == 1
    assert system_text({"instructions": "I"}) == "I"
    assert system_text({"system": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}) == "a\n\nb"


def test_a_clock_does_not_split_a_conversation_into_sessions() -> None:
    one = {"messages": [{"role": "system", "content": f"P\n{STAMP}"}, {"role": "user", "content": "U1"}]}
    later = "P\n<memory_metadata>updated 2026-09-14T11:00:00Z</memory_metadata>"
    two = {"messages": [{"role": "system", "content": later}, {"role": "user", "content": "U1"}]}
    assert session_of(None, one) == session_of(None, two)


def test_answers_without_timings_count_for_their_session_by_usage() -> None:
    from orchestrator.serve.cache.sessions import usage_counts

    responses = {"input_tokens": 3100, "output_tokens": 8, "input_tokens_details": {"cached_tokens": 3000}}
    assert usage_counts(responses) == {"cache_n": 3000, "prompt_n": 100}
    assert usage_counts({"input_tokens": 40, "cache_read_input_tokens": 900}) == {"cache_n": 900, "prompt_n": 40}
    assert usage_counts({"output_tokens": 3}) is None
