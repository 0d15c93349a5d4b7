"""A client's session key (Codex's prompt_cache_key, Claude Code's session id) keeps the session on
its slot and replica (``SlotHoldings.choose``), whatever the prefixes say."""

from __future__ import annotations

from orchestrator.serve.anthropic.adapter import MessagesRoute
from orchestrator.serve.responses.adapter import ResponsesRoute
from orchestrator.supervise.affinity import ACTIVE_S, Replica, SlotHoldings

REPLICAS = [Replica("m-0", 2, 0), Replica("m-1", 2, 0)]


def test_a_session_key_goes_back_to_its_slot() -> None:
    holdings = SlotHoldings()
    system = list(range(100))
    holdings.begin("m-1", 1, [*system, 1, 2, 3], key="k:session-a")
    holdings.end("m-1", 1)
    holdings.set("m-0", 0, [*system, 7, 8, 9, 10, 11])  # another session, a longer shared prefix
    choice = holdings.choose([*system, 7, 8, 9, 10, 11, 12], REPLICAS, key="k:session-a")
    assert choice is not None and (choice.replica, choice.slot) == ("m-1", 1) and choice.matched == 100
    # without the key, the longest prefix wins; while its slot is busy, the key does not wait for it
    other = holdings.choose([*system, 7, 8, 9, 10, 11, 12], REPLICAS)
    assert other is not None and (other.replica, other.slot) == ("m-0", 0)
    holdings.begin("m-1", 1, [*system, 1, 2, 3])
    busy = holdings.choose([*system, 1, 2, 3, 4], REPLICAS, key="k:session-a")
    assert busy is not None and (busy.replica, busy.slot) != ("m-1", 1)


def test_session_keys_of_codex_and_claude_code() -> None:
    # each route reads its own field: Codex's prompt_cache_key, Claude Code's metadata.user_id
    assert ResponsesRoute().session_key({"prompt_cache_key": "01a2320d"}) == "k:01a2320d"
    user_id = '{"device_id":"3f24","account_uuid":"","session_id":"7e89f25a"}'
    messages = MessagesRoute()
    assert messages.session_key({"metadata": {"user_id": user_id}}) == "s:7e89f25a"
    assert messages.session_key({"metadata": {"user_id": "plain"}}) is None and messages.session_key({}) is None
    assert ResponsesRoute().session_key({"metadata": {"user_id": user_id}}) is None  # not a Responses field


def test_another_conversation_on_the_same_system_prompt_takes_an_empty_slot() -> None:
    """Conversation A holds slot 0 (system prompt + its history); B shares only the system prompt.
    While a slot is empty, B goes there instead of cutting A's history off; a side request (its own
    key) does the same; A's own next turn stays; a slot idle past ACTIVE_S is fair game."""
    one = [Replica("m-0", 2, 0)]
    system = list(range(100))
    holdings = SlotHoldings()
    holdings.begin("m-0", 0, [*system, 1, 2, 3], key="s|A")
    holdings.end("m-0", 0)
    b = holdings.choose([*system, 7, 8], one, key="s|B")
    assert b is not None and (b.slot, b.matched) == (1, 0)
    a = holdings.choose([*system, 1, 2, 3, 4, 5], one, key="s|A")
    assert a is not None and (a.slot, a.matched) == (0, 103)
    holdings.begin("m-0", 1, [*system, 7, 8], key="s|B")  # B on slot 1, busy
    side = holdings.choose([*system, 9], one, key="s|title")
    assert side is not None and side.slot == 0  # no empty slot left: the shared start is better than nothing
    quiet = SlotHoldings()
    quiet.begin("m-0", 0, [*system, 1, 2, 3], key="s|A")
    quiet.end("m-0", 0)
    quiet._used[("m-0", 0)] -= ACTIVE_S + 1  # A went quiet long ago: its slot's shared start is reused
    late = quiet.choose([*system, 7, 8], one, key="s|B")
    assert late is not None and (late.slot, late.matched) == (0, 100)


def test_a_side_request_of_the_session_takes_the_empty_slot_and_the_conversation_keeps_its_own() -> None:
    """B56: Claude Code's title request carries the main conversation's session id but another
    system prompt. At parallel 2 it goes to the empty slot; the main conversation's next turn goes
    back to its slot with its whole prefix; a second side request goes to the first one's slot."""
    one = [Replica("m-0", 2, 0)]
    main = list(range(1000, 1700))  # turn 1: system prompt "S0 P" and U1
    side = [1000, 1001, *range(5000, 5040)]  # the same template header, another system prompt
    holdings = SlotHoldings()
    holdings.begin("m-0", 0, main, key="s:S-1")
    holdings.end("m-0", 0)
    first_side = holdings.choose(side, one, key="s:S-1")
    assert first_side is not None and (first_side.slot, first_side.matched) == (1, 0)
    holdings.begin("m-0", 1, side, key="s:S-1")
    holdings.end("m-0", 1)
    turn2 = holdings.choose([*main, 7, 8, 9], one, key="s:S-1")
    assert turn2 is not None and (turn2.slot, turn2.matched) == (0, 700)
    holdings.begin("m-0", 0, [*main, 7, 8, 9], key="s:S-1")
    holdings.end("m-0", 0)
    again = holdings.choose([*side[:30], 6000], one, key="s:S-1")
    assert again is not None and (again.slot, again.matched) == (1, 30)


def test_a_side_request_sharing_the_system_prompt_head_still_spares_the_conversation() -> None:
    """A subagent of the session shares the first lines of the system prompt (more than MIN_MATCH
    tokens, far less than half of the conversation): it takes the empty slot; with no slot empty it
    takes the session's own slot (the shared start beats nothing)."""
    one = [Replica("m-0", 2, 0)]
    conversation = list(range(2000))
    subagent = [*range(50), 9000, 9001]
    holdings = SlotHoldings()
    holdings.begin("m-0", 0, conversation, key="s:S-1")
    holdings.end("m-0", 0)
    choice = holdings.choose(subagent, one, key="s:S-1")
    assert choice is not None and (choice.slot, choice.matched) == (1, 0)
    holdings.begin("m-0", 1, [7, 7, 7], key="s:other")  # the other slot is busy now
    busy = holdings.choose(subagent, one, key="s:S-1")
    assert busy is not None and (busy.slot, busy.matched) == (0, 50)
