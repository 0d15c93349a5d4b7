"""Response repair (orchestrator.serve.repair.response): case R01, whole and streamed at every split point."""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.serve.repair.response import is_reasoning_only, repair_response, split_reasoning
from orchestrator.serve.repair.stream import StreamingThinkSplitter, StreamRepair, repair_stream_chunk

CASES_FILE = Path(__file__).resolve().parents[2] / "data" / "chat_requests.json"
R_CASES: list[dict[str, Any]] = json.loads(CASES_FILE.read_text())["response_cases"]
R01 = next(c for c in R_CASES if c["id"] == "R01")


def _splits(text: str, parts: int) -> list[list[str]]:
    """Every way to cut ``text`` into ``parts`` chunks (empty chunks included)."""
    out = []
    for cuts in itertools.combinations_with_replacement(range(len(text) + 1), parts - 1):
        bounds = (0, *cuts, len(text))
        out.append([text[a:b] for a, b in itertools.pairwise(bounds)])
    return out


def _stream(chunks: list[str], *, thinking: bool) -> tuple[str, str]:
    splitter = StreamingThinkSplitter(thinking)
    pieces = [p for chunk in chunks for p in splitter.feed(chunk)] + splitter.flush()
    assert all(text for _, text in pieces), "no empty pieces"
    reasoning = "".join(t for f, t in pieces if f == "reasoning_content")
    content = "".join(t for f, t in pieces if f == "content")
    return reasoning, content


def _completion(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "demo",
        "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
        "usage": {"completion_tokens": 9},
    }


# --- R01 -------------------------------------------------------------------------------------


def test_r01_split_reasoning() -> None:
    assert split_reasoning(R01["upstream_content"]) == (R01["expect_reasoning_content"], R01["expect_content"])


def test_r01_non_streamed() -> None:
    body = _completion({"role": "assistant", "content": R01["upstream_content"]})
    pristine = copy.deepcopy(body)
    fixed, kinds = repair_response(body, thinking=True)
    assert fixed["choices"][0]["message"] == {
        "role": "assistant",
        "content": R01["expect_content"],
        "reasoning_content": R01["expect_reasoning_content"],
    }
    assert kinds == ["think_split"]
    assert fixed["usage"] is body["usage"] and body == pristine


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_r01_streamed_at_every_split_point(parts: int) -> None:
    text = R01["upstream_content"]
    expected = (R01["expect_reasoning_content"], R01["expect_content"])
    splits = _splits(text, parts)
    assert len(splits) == {1: 1, 2: len(text) + 1, 3: (len(text) + 1) * (len(text) + 2) // 2}[parts]
    for chunks in splits:
        assert _stream(chunks, thinking=True) == expected, chunks


def test_r01_streamed_one_character_at_a_time() -> None:
    text = R01["upstream_content"]
    assert _stream(list(text), thinking=True) == (R01["expect_reasoning_content"], R01["expect_content"])


def test_r01_tag_split_across_chunks_as_in_the_report() -> None:
    splitter = StreamingThinkSplitter(thinking=True)
    assert splitter.feed("The user greets me.\n</th") == [("reasoning_content", "The user greets me.")]
    assert splitter.feed("ink>\n\nHello") == [("content", "Hello")]
    assert splitter.feed(" there!") == [("content", " there!")]
    assert splitter.flush() == []


# --- the splitter on other texts, exhaustively over split points -----------------------------

TEXTS = [
    "R01 style\n</think>\n\nanswer",
    "<think>\nfull pair\n</think>\n\nanswer",
    "  \n<think>x</think>y",
    "</think>answer right away",
    "no tags at all, a < b and c <= d",
    "reasoning <b>bold</b> and </thin k>\n</think>content with </think> again",
    "<thi",
    "cut off while thinking </th",
    "  spaced  \n",
    "a\n\n</think>\n",
]


def _expected(text: str, *, thinking: bool) -> tuple[str, str]:
    """The streamed result, from the non-streamed rules (see the module docstring)."""
    reasoning, _content = split_reasoning(text)
    if reasoning is None:  # no tag: ambiguous text follows the request's thinking switch
        return (text.strip(), "") if thinking else ("", text)
    if text.lstrip().startswith("<think>") or thinking:
        after = text.split("</think>", 1)[1] if "</think>" in text else ""
        return reasoning, after.lstrip()  # a stream keeps the content's trailing whitespace
    # thinking off: text before the tag was already streamed as content
    before, after = text.split("</think>", 1)
    return "", before + after.lstrip()


@pytest.mark.parametrize("thinking", [True, False])
@pytest.mark.parametrize("text", TEXTS)
def test_streaming_equals_rules_at_every_split_point(text: str, thinking: bool) -> None:
    expected = _expected(text, thinking=thinking)
    for parts in (1, 2, 3):
        for chunks in _splits(text, parts):
            assert _stream(chunks, thinking=thinking) == expected, chunks


def test_hold_back_is_minimal() -> None:
    splitter = StreamingThinkSplitter(thinking=True)
    assert splitter.feed("abc<x") == [("reasoning_content", "abc<x")]  # '<x' cannot become the tag
    assert splitter.feed(" 1 </") == [("reasoning_content", " 1")]  # ' </' might precede '</think>'
    assert splitter.feed("b> ok") == [("reasoning_content", " </b> ok")]
    content = StreamingThinkSplitter(thinking=False)
    assert content.feed("  ") == []  # could still be '  <think>'
    assert content.feed("Hi ") == [("content", "  Hi ")]  # whitespace in content is not held
    assert content.feed("x </thi") == [("content", "x ")]
    assert content.flush() == [("content", "</thi")]  # never completed: plain text


def test_thinking_off_streams_ambiguous_text_as_content() -> None:
    assert _stream(["Paris is the capital."], thinking=False) == ("", "Paris is the capital.")
    assert _stream(["Paris is the capital."], thinking=True) == ("Paris is the capital.", "")


# --- non-streamed repair ---------------------------------------------------------------------


def test_response_without_tags_is_the_same_object() -> None:
    body = _completion({"role": "assistant", "content": "Hello", "reasoning_content": "Greeting."})
    assert repair_response(body, thinking=True) == (body, [])
    assert repair_response(body, thinking=False)[0] is body  # content present: nothing to move


def test_thinking_off_answer_in_reasoning_moves_to_content() -> None:
    for content in (None, "", "\n"):
        body = _completion({"role": "assistant", "content": content, "reasoning_content": "4"})
        fixed, kinds = repair_response(body, thinking=False)
        assert fixed["choices"][0]["message"] == {"role": "assistant", "content": "4"}
        assert kinds == ["reasoning_moved_to_content"]
        assert body["choices"][0]["message"]["reasoning_content"] == "4"
        # with thinking on the same response is a reasoning-only answer and is left alone
        assert repair_response(body, thinking=True)[0] is body
        assert is_reasoning_only(body) and not is_reasoning_only(fixed)


def test_thinking_off_tag_with_nothing_after_gives_the_reasoning_as_content() -> None:
    body = _completion({"role": "assistant", "content": "4\n</think>\n\n"})
    fixed, kinds = repair_response(body, thinking=False)
    assert fixed["choices"][0]["message"] == {"role": "assistant", "content": "4"}
    assert kinds == ["think_split", "reasoning_moved_to_content"]


def test_tool_call_with_empty_content_is_not_reasoning_only() -> None:
    calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    body = _completion({"role": "assistant", "content": "", "reasoning_content": "Call f.", "tool_calls": calls})
    assert repair_response(body, thinking=False)[0] is body
    assert not is_reasoning_only(body)


def test_existing_reasoning_is_kept_before_split_reasoning() -> None:
    body = _completion({"role": "assistant", "content": "more</think>answer", "reasoning_content": "first"})
    fixed, _ = repair_response(body, thinking=True)
    assert fixed["choices"][0]["message"]["reasoning_content"] == "first\n\nmore"
    assert fixed["choices"][0]["message"]["content"] == "answer"


def test_full_pair_and_truncated_reasoning() -> None:
    assert split_reasoning("<think>\nr\n</think>\n\nc\n") == ("r", "c")
    assert split_reasoning("<think>\nstill thinking") == ("still thinking", "")
    assert split_reasoning("just text ") == (None, "just text ")
    assert split_reasoning("a</think>b</think>c") == ("a", "b</think>c")


def test_is_reasoning_only_needs_every_choice() -> None:
    only = {"message": {"role": "assistant", "content": "", "reasoning_content": "hmm"}}
    answered = {"message": {"role": "assistant", "content": "ok", "reasoning_content": "hmm"}}
    assert is_reasoning_only({"choices": [only, only]})
    assert not is_reasoning_only({"choices": [only, answered]})
    assert not is_reasoning_only({"choices": []})
    assert not is_reasoning_only({"error": {"message": "x"}})


# --- streamed chunks, as the proxy sees them -------------------------------------------------


def _sse(deltas: list[dict[str, Any]], *, index: int = 0) -> list[dict[str, Any]]:
    """llama-server-shaped chunks: a role chunk, one chunk per delta, a finish chunk."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "demo"}
    chunks = [
        {**base, "choices": [{"index": index, "delta": {"role": "assistant", "content": None}, "finish_reason": None}]}
    ]
    chunks += [{**base, "choices": [{"index": index, "delta": d, "finish_reason": None}]} for d in deltas]
    chunks.append(
        {
            **base,
            "choices": [{"index": index, "delta": {}, "finish_reason": "stop"}],
            "timings": {"draft_n": 4, "draft_n_accepted": 3},
        }
    )
    return chunks


def _proxy(
    chunks: list[dict[str, Any]], *, thinking: bool, n: int = 1
) -> tuple[dict[int, dict[str, str]], int, list[str]]:
    """Run chunks through StreamRepair the way the proxy does; return what the client
    accumulates per choice, how many events were parsed, and the repair kinds."""
    fix = StreamRepair(thinking=thinking, n=n)
    parsed, kinds, seen = 0, [], {}
    sent: list[dict[str, Any]] = []
    for chunk in chunks:
        raw = json.dumps(chunk, ensure_ascii=False).encode()
        if fix.needs_parse(raw):
            parsed += 1
            original = copy.deepcopy(chunk)
            out, k = fix.repair(chunk)
            assert chunk == original, "chunk mutated"
            kinds += k
            sent.append(out)
        else:
            sent.append(json.loads(raw))
    tail = fix.finish()
    if tail is not None:
        sent.append(tail)
    for chunk in sent:
        for choice in chunk["choices"]:
            acc = seen.setdefault(choice["index"], {"reasoning_content": "", "content": ""})
            for field in acc:
                acc[field] += choice["delta"].get(field) or ""
    return seen, parsed, kinds


@pytest.mark.parametrize("parts", [2, 3])
def test_r01_through_stream_chunks_at_every_split_point(parts: int) -> None:
    expected = {"reasoning_content": R01["expect_reasoning_content"], "content": R01["expect_content"]}
    for pieces in _splits(R01["upstream_content"], parts):
        chunks = _sse([{"content": p} for p in pieces])
        seen, _, kinds = _proxy(chunks, thinking=True)
        assert seen == {0: expected}, pieces
        assert kinds == ["think_split"]


def test_stream_chunk_keeps_other_fields_and_releases_held_text_at_finish() -> None:
    splitters: dict[int, StreamingThinkSplitter] = {}
    chunks = _sse([{"content": "thought\n</th"}])
    first, _ = repair_stream_chunk(chunks[0], splitters, thinking=True)
    assert first is chunks[0]  # role chunk, nothing to change
    mid, kinds = repair_stream_chunk(chunks[1], splitters, thinking=True)
    assert mid["choices"][0]["delta"] == {"reasoning_content": "thought"}
    assert mid["id"] == "chatcmpl-1" and kinds == ["think_split"]
    last, _ = repair_stream_chunk(chunks[2], splitters, thinking=True)
    assert last["choices"][0] == {"index": 0, "delta": {"reasoning_content": "\n</th"}, "finish_reason": "stop"}
    assert last["timings"] is chunks[2]["timings"]


def test_thinking_off_plain_stream_is_forwarded_untouched_after_the_first_word() -> None:
    chunks = _sse([{"content": w} for w in ["The", " answer", " is", " 4", "."]])
    seen, parsed, kinds = _proxy(chunks, thinking=False)
    assert seen == {0: {"reasoning_content": "", "content": "The answer is 4."}}
    assert parsed == 2  # the role chunk and "The"; the rest need no parsing
    assert kinds == []


def test_thinking_off_stray_tag_is_removed() -> None:
    chunks = _sse([{"content": c} for c in ["Sure", ".</", "think>\n", "\n4"]])
    seen, _, kinds = _proxy(chunks, thinking=False)
    assert seen[0] == {"reasoning_content": "", "content": "Sure.4"}
    assert kinds == ["think_split"]


def test_thinking_off_reasoning_deltas_are_streamed_as_content() -> None:
    chunks = _sse([{"reasoning_content": "The"}, {"reasoning_content": " answer is 4."}])
    seen, _, kinds = _proxy(chunks, thinking=False)
    assert seen[0] == {"reasoning_content": "", "content": "The answer is 4."}
    assert kinds == ["reasoning_moved_to_content"]


def test_upstream_that_splits_reasoning_itself_passes_through() -> None:
    deltas = [
        {"reasoning_content": "The user"},
        {"reasoning_content": " greets me."},
        {"content": "Hello"},
        {"content": " there!"},
        {"content": " Bye."},
    ]
    chunks = _sse(deltas)
    seen, parsed, kinds = _proxy(chunks, thinking=True)
    assert seen[0] == {"reasoning_content": "The user greets me.", "content": "Hello there! Bye."}
    assert kinds == []
    assert parsed == 4  # role + two reasoning + first content; then plain content is not parsed
    splitters: dict[int, StreamingThinkSplitter] = {}
    for chunk in chunks:
        assert repair_stream_chunk(chunk, splitters, thinking=True)[0] is chunk


def test_stream_end_without_finish_reason_flushes_held_text() -> None:
    chunks = _sse([{"content": "answer <"}])[:-1]  # upstream died before the finish chunk
    seen, _, _ = _proxy(chunks, thinking=False)
    assert seen[0]["content"] == "answer <"


def test_two_choices_are_split_independently() -> None:
    a = _sse([{"content": "ra</thi"}, {"content": "nk>ca"}], index=0)
    b = _sse([{"content": "rb\n</"}, {"content": "think> cb"}], index=1)
    interleaved = [c for pair in zip(a, b, strict=True) for c in pair]
    seen, _, kinds = _proxy(interleaved, thinking=True, n=2)
    assert seen == {0: {"reasoning_content": "ra", "content": "ca"}, 1: {"reasoning_content": "rb", "content": "cb"}}
    assert kinds == ["think_split", "think_split"]


def test_needs_parse_on_escaped_angle_bracket() -> None:
    fix = StreamRepair(thinking=False)
    fix.repair(_sse([{"content": "Hi"}])[1])
    assert not fix.needs_parse(b'{"choices":[{"index":0,"delta":{"content":" there"}}]}')
    assert fix.needs_parse(b'{"choices":[{"index":0,"delta":{"content":"\\u003c/think>"}}]}')
