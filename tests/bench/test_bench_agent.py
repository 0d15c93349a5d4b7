"""``orchestrator bench agent`` (``scripts/bench_agent.py``): the session scenarios built from the
recordings, the per-turn and per-scenario figures on literal numbers, and the whole tool on one small
recording against real llama-servers (its output's structure and arithmetic, never its timings)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.bench import agent_report as report
from orchestrator.bench import agent_scenarios as sc
from orchestrator.bench import agent_shapes as shapes
from orchestrator.bench.agent_stream import Answer, Lines, is_output, longest_silence, prompt_usage

REPO = Path(__file__).resolve().parents[2]
SESSIONS = REPO / "tests" / "data" / "agent_sessions"


def _rec(name: str) -> sc.Recording:
    return sc.recording(name, json.loads((SESSIONS / f"{name}.json").read_text()))


RECORDINGS = ["claude_code_reminder", "codex", "opencode"]

# --------------------------------------------------------------------------- scenarios


@pytest.mark.parametrize("name", [*RECORDINGS, "claude_code"])
def test_every_request_of_a_session_extends_the_one_before(name: str) -> None:
    rec = _rec(name)
    items = [shapes.history(b, rec.route) for b in rec.requests]
    for before, after in itertools.pairwise(items):
        assert after[: len(before)] == before and len(after) > len(before)
    # the first request is the user's opening: no answer of the model yet
    assert not any(shapes.is_assistant(i) for i in items[0])


def test_claude_codes_first_request_takes_the_reminder_form_of_the_later_ones() -> None:
    rec = _rec("claude_code_reminder")
    [first] = shapes.history(rec.requests[0], rec.route)
    assert first["role"] == "user" and shapes.first_prompt(rec.requests[0], rec.route) == "Say hello in one word"


def test_the_replay_sends_the_recording_as_the_client_did() -> None:
    rec = _rec("claude_code_reminder")
    bodies = [step[0].body for step in sc.replay(rec).steps]
    assert [b["messages"] for b in bodies] == [b["messages"] for b in rec.recorded]
    assert [m["role"] for m in bodies[0]["messages"]] == ["user", "system"]  # its real first request
    assert all(b["chat_template_kwargs"] == {"enable_thinking": False} for b in bodies)


@pytest.mark.parametrize("name", RECORDINGS)
@pytest.mark.parametrize("thinking", [True, False])
def test_a_user_turn_follows_the_tool_chain(name: str, thinking: bool) -> None:
    rec = _rec(name)
    scenario = sc.user_turn(rec, thinking)
    bodies = [step[0].body for step in scenario.steps]
    assert len(bodies) == len(rec.requests) + 1
    chain, last = shapes.history(bodies[-2], rec.route), shapes.history(bodies[-1], rec.route)
    assert last[: len(chain)] == chain
    added = json.dumps(last[len(chain) :])
    assert sc.ANSWER in added and sc.QUESTION in added
    assert all(b["chat_template_kwargs"]["enable_thinking"] is thinking for b in bodies)
    sent_back = json.dumps(last)
    if thinking:  # each client's way: a thinking block, an encrypted reasoning item, reasoning_content
        marker = {"/v1/messages": '"type": "thinking"', "/v1/responses": "encrypted_content"}
        assert sent_back.count(marker.get(rec.route, "reasoning_content")) == len(rec.requests)
    else:
        assert "reasoning_content" not in sent_back and '"type": "thinking"' not in sent_back


@pytest.mark.parametrize("name", RECORDINGS)
def test_two_sessions_share_the_system_prompt_and_tools_not_the_opening(name: str) -> None:
    rec = _rec(name)
    alternate, concurrent = sc.alternate(rec), sc.concurrent(rec)
    assert [len(s) for s in alternate.steps] == [1] * 2 * len(rec.requests)
    assert [len(s) for s in concurrent.steps] == [2] * len(rec.requests)
    a, b = concurrent.steps[0][0].body, concurrent.steps[0][1].body
    assert [c.session for c in concurrent.steps[0]] == ["a", "b"]
    assert a.get("tools") == b.get("tools") and a.get("system") == b.get("system")
    assert shapes.first_prompt(b, rec.route) == sc.SECOND_PROMPT != shapes.first_prompt(a, rec.route)
    if rec.route != "/v1/chat/completions":  # opencode sends no session id
        assert sc.SECOND_SESSION in json.dumps(b) and sc.SECOND_SESSION not in json.dumps(a)
    assert [c.body for s in alternate.steps[::2] for c in s] == [s[0].body for s in concurrent.steps]


def test_side_requests_keep_the_session_and_system_prompt() -> None:
    rec = _rec("claude_code_reminder")
    scenario = sc.side(rec)
    sessions = [c.session for step in scenario.steps for c in step]
    assert sessions == ["a", "a", "title", "a", "a", "summary", "a", "a"]
    title = scenario.steps[2][0].body
    assert title["system"] == rec.requests[1]["system"] and title["tools"] == rec.requests[1]["tools"]
    assert title["metadata"] == rec.requests[1]["metadata"]
    assert title["messages"] == [{"role": "user", "content": [{"type": "text", "text": sc.TITLE}]}]


def test_opencodes_side_request_keeps_its_system_message() -> None:
    rec = _rec("opencode")
    title = sc.side(rec).steps[2][0].body
    assert [m["role"] for m in title["messages"]] == ["system", "user"]


def test_scenarios_are_chosen_by_pattern_in_order() -> None:
    every = sc.every_scenario([_rec(n) for n in RECORDINGS], swap_at=3)
    names = [s.name for s in sc.select(every, ["swap/*", "user-turn/codex/*", "swap/codex"])]
    assert names == ["swap/claude_code_reminder", "swap/codex", "swap/opencode", "user-turn/codex/think",
                     "user-turn/codex/no-think"]  # fmt: skip
    assert {s.swap_before for s in every if s.name.startswith("swap/")} == {3}
    assert len(sc.select(every, list(sc.DEFAULT))) == 9
    with pytest.raises(ValueError, match="nothing/"):
        sc.select(every, ["nothing/*"])


# --------------------------------------------------------------------------- figures


def test_turns_count_new_tokens_per_session() -> None:
    answers = [
        (1, "a", Answer(200, total=1000, cached=0, ttft=1.0, silence=1.0)),
        (1, "b", Answer(200, total=1010, cached=900, ttft=0.5, silence=0.4)),
        (2, "a", Answer(200, total=1100, cached=1000, ttft=0.2, silence=0.2)),
        (3, "b", Answer(200, total=1200, cached=100, ttft=0.3, silence=2.0)),
        (4, "a", Answer(500, error="boom")),
        (5, "a", Answer(200, total=1300, cached=0)),  # after a failed turn: a first turn again
        (6, "a", Answer(200, total=1250, cached=1200)),  # a shorter prompt: no new tokens
    ]
    rows = report.turns(answers)
    assert [r.new for r in rows] == [None, None, 100, 190, None, None, 0]
    assert [r.processed for r in rows] == [1000, 110, 100, 1100, None, 1300, 50]
    assert [r.ok for r in rows] == [None, None, True, False, None, None, True]
    s = report.summarize(rows)
    assert (s.turns, s.errors, s.within, s.counted) == (7, 1, 2, 3)
    assert (s.processed_later, s.new_later, s.processed_all) == (1250, 290, 3660)
    assert s.per_new == pytest.approx(1250 / 290)
    assert (s.ttft_p50, s.ttft_max, s.silence_max) == (0.4, 1.0, 2.0)  # median of 1.0, 0.5, 0.2, 0.3


def test_the_side_by_side_table_has_a_row_per_scenario_and_ratios_to_the_first_side() -> None:
    after = report.summarize(report.turns([(1, "a", Answer(200, 100, 0, 1.0, 2.0)), (2, "a", Answer(200, 150, 100))]))
    before = report.summarize(report.turns([(1, "a", Answer(200, 100, 0, 3.0, 8.0)), (2, "a", Answer(200, 150, 0))]))
    lines = report.side_by_side(["after", "before"], {"x/y": {"after": after, "before": before}, "z": {"after": after}})
    assert lines[0].startswith("| scenario (after → before) |") and len(lines) == 4
    cells = [c.strip() for c in lines[2].split("|")[1:-1]]
    assert cells == ["x/y", "1/1 → 0/1", "1.00 → 3.00 (3.0x)", "150 → 250 (1.7x)", "1.00 → 3.00 (3.0x)",
                     "1.00 → 3.00 (3.0x)", "2.00 → 8.00 (4.0x)", "0 → 0"]  # fmt: skip
    assert lines[3].split("|")[2].strip() == "1/1 → -"


def test_the_longest_silence_counts_the_wait_before_the_first_byte() -> None:
    assert longest_silence(10.0, [13.0, 13.5, 14.0]) == 3.0
    assert longest_silence(10.0, [10.5, 11.0, 15.0]) == 4.0
    assert longest_silence(10.0, []) is None


def test_lines_are_split_across_reads() -> None:
    lines = Lines()
    assert lines.feed(b": ping\n\nda") == [": ping", ""]
    assert lines.feed(b'ta: {"a": 1}\r\n') == ['data: {"a": 1}']


def test_usage_and_output_events_of_each_api() -> None:
    start = {"type": "message_start", "message": {"usage": {"input_tokens": 7, "cache_read_input_tokens": 90}}}
    assert prompt_usage("/v1/messages", start) == (97, 90)
    done = {"type": "response.completed", "response": {"usage": {"input_tokens": 50,
            "input_tokens_details": {"cached_tokens": 40}}}}  # fmt: skip
    assert prompt_usage("/v1/responses", done) == (50, 40)
    chunk = {"choices": [], "usage": {"prompt_tokens": 30, "prompt_tokens_details": {"cached_tokens": 20}}}
    assert prompt_usage("/v1/chat/completions", chunk) == (30, 20)
    assert is_output("/v1/messages", {"type": "content_block_delta"}) and not is_output("/v1/messages", start)
    assert is_output("/v1/responses", {"type": "response.output_text.delta"})
    assert not is_output("/v1/responses", {"type": "response.created"})
    assert is_output("/v1/chat/completions", {"choices": [{"delta": {"reasoning_content": "x"}}]})
    assert not is_output("/v1/chat/completions", {"choices": [{"delta": {"role": "assistant", "content": None}}]})


# --------------------------------------------------------------------------- the tool, end to end

SYSTEM = "You are a coding agent in a terminal. Read before you edit; run the tests after. " * 12
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command",
          "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]  # fmt: skip


def _small_recording(path: Path) -> None:
    """An opencode-shaped session of four requests (three tool calls)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Say hi"}]
    requests = []
    for n in range(1, 5):
        requests.append({"model": "demo", "messages": list(messages), "tools": TOOLS, "stream": True})
        call = {"id": f"c{n}", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
        messages += [{"role": "assistant", "content": "", "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{n}", "content": f"file-{n}.py\n"}]  # fmt: skip
    path.write_text(json.dumps({"client": "test", "route": "/v1/chat/completions", "requests": requests}))


def _consistent(turns: list[dict[str, Any]]) -> None:
    previous: dict[str, int] = {}
    for t in turns:
        assert t["status"] == 200 and not t["error"], t
        assert t["processed"] == t["prompt"] - t["cached"] >= 0
        before = previous.get(t["session"])
        assert t["new"] == (None if before is None else max(0, t["prompt"] - before))
        assert t["ok"] == (None if t["new"] is None else t["processed"] <= t["new"] + report.SLACK)
        assert t["ttft"] is not None and t["silence"] is not None
        previous[t["session"]] = t["prompt"]


@pytest.mark.native
@pytest.mark.slow
def test_the_tool_replays_a_small_session_on_both_sides(tmp_path: Path, bin_info: Any, demo_model: Path) -> None:
    _small_recording(tmp_path / "small.json")
    scenarios = ["user-turn/small/think", "concurrent/small", "swap/small"]
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_agent.py"), str(tmp_path / "small.json"),
         "--scenarios", ",".join(scenarios), "--ctx", "4096", "--swap-at", "2", "--threads", "1",
         "--json", str(tmp_path / "out.json"), "--markdown", str(tmp_path / "out.md")],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["sides"] == ["after", "before"]
    assert sorted(result["runs"]) == sorted(f"parallel=1/{side}/{s}" for side in ("after", "before") for s in scenarios)
    for key, run in result["runs"].items():
        turns, summary = run["turns"], run["summary"]
        assert len(turns) == {"user-turn": 5, "concurrent": 8, "swap": 4}[key.split("/")[2]], key
        _consistent(turns)
        later = [t for t in turns if t["new"] is not None]
        assert summary["counted"] == len(later) and summary["within"] == sum(1 for t in later if t["ok"])
        assert summary["processed_all"] == sum(t["processed"] for t in turns)
        assert summary["processed_later"] == sum(t["processed"] for t in later)
        assert summary["new_later"] == sum(t["new"] for t in later)
        assert summary["silence_max"] == max(t["silence"] for t in turns)
    concurrent = result["runs"]["parallel=1/after/concurrent/small"]["turns"]
    assert [(t["step"], t["session"]) for t in concurrent] == [(n, s) for n in (1, 2, 3, 4) for s in "ab"]
    table = (tmp_path / "out.md").read_text().splitlines()
    assert table[0].startswith("parallel: 1 (commit ")
    rows = [line for line in table if line.startswith("| ") and not line.startswith("| scenario")]
    assert [r.split("|")[1].strip() for r in rows] == scenarios
    assert "\n".join(table) in out.stdout
