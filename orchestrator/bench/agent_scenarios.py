"""The agent session scenarios of ``orchestrator bench agent``, built from recorded sessions.

Pure (no I/O). A recording (``tests/data/agent_sessions/*.json``) is the list of request bodies one
real client sent, turn by turn, on one route. A :class:`Scenario` is a list of steps; a step's calls
are sent at once (two sessions in flight together) and each call names the session it continues,
so its new tokens are counted against that session's previous prompt. The scenarios
(``replay/REC`` is the recording as the client sent it; the others start from it as a growing
session, :func:`growing`):

- ``replay/REC``: the recording, thinking off.
- ``user-turn/REC/think`` and ``/no-think``: its tool chain, then the model's text answer and a new
  user message; thinking on (every answer's reasoning sent back the client's way) or off.
- ``alternate/REC``: two sessions of the same client (the second: another first message and
  session id, the same long system prompt and tools) taking turns.
- ``concurrent/REC``: the same two sessions, each step's two requests in flight at once.
- ``side/REC``: one session with a title request after its second turn and a summary request after
  its fourth (the same system prompt, tools and session id, as Claude Code sends them).
- ``swap/REC``: one session, its model unloaded and another one loaded before turn 4.

Every request switches thinking explicitly, so the endpoint and llama-server render the same prompt.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

from orchestrator.bench import agent_shapes as shapes

SECOND_PROMPT = "List the files in this folder and tell me which one is the largest"
SECOND_SESSION = "5e0c1d2b-bench-0000-0000-second-session"
TITLE = "Write a 5-10 word title for this conversation. Answer with the title only."
SUMMARY = "Summarize this conversation so far in two sentences, for a status line."
ANSWER = "Done: every command ran and printed its word."
QUESTION = "Thanks. Now add a test for it and run the whole suite."
SWAP_AT = 4
# What the issue's before/after table shows by default (the stored recordings' names).
DEFAULT = (
    "user-turn/claude_code_reminder/*",
    "user-turn/codex/think",
    "user-turn/opencode/*",
    "alternate/claude_code_reminder",
    "concurrent/claude_code_reminder",
    "side/claude_code_reminder",
    "swap/claude_code_reminder",
)


@dataclass(frozen=True)
class Call:
    """One request: the session it continues (``a``, ``b``, ``title``...), its route and body."""

    session: str
    route: str
    body: dict[str, Any]


@dataclass(frozen=True)
class Scenario:
    name: str
    steps: list[list[Call]]
    swap_before: int = 0  # unload the model before this step (1-based); 0: never
    about: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def route(self) -> str:
        return self.steps[0][0].route


@dataclass(frozen=True)
class Recording:
    name: str
    route: str
    requests: list[dict[str, Any]]  # each extending the one before (:func:`growing`)
    recorded: list[dict[str, Any]]  # as the client sent them
    client: str = ""


def recording(name: str, data: dict[str, Any]) -> Recording:
    """A recording file's content (``{"route", "requests", "client"}``)."""
    route, requests = data["route"], data["requests"]
    return Recording(name, route, growing(requests, route), requests, str(data.get("client", "")))


def growing(requests: list[dict[str, Any]], route: str) -> list[dict[str, Any]]:
    """Each request's history taken from the last request, cut before the model's answer to it, so
    every request extends the one before (a client that sent its first request in another form,
    such as Claude Code's trailing system message later kept as a ``<system-reminder>``, sends the
    later form from the start). Each request keeps its other fields."""
    last = shapes.history(requests[-1], route)
    return [shapes.with_history(b, route, shapes.cut_before_answer(last, n)) for n, b in enumerate(requests, 1)]


def _session(rec: Recording, thinking: bool = False, recorded: bool = False) -> list[dict[str, Any]]:
    bodies = [shapes.with_thinking(b, rec.route, thinking) for b in (rec.recorded if recorded else rec.requests)]
    return [shapes.with_reasoning(b, rec.route) for b in bodies] if thinking else bodies


def _second(bodies: list[dict[str, Any]], route: str) -> list[dict[str, Any]]:
    return [shapes.with_session(shapes.with_first_prompt(b, route, SECOND_PROMPT), SECOND_SESSION) for b in bodies]


def _one(session: str, route: str, bodies: list[dict[str, Any]]) -> list[list[Call]]:
    return [[Call(session, route, b)] for b in bodies]


def replay(rec: Recording) -> Scenario:
    steps = _one("a", rec.route, _session(rec, recorded=True))
    return Scenario(f"replay/{rec.name}", steps, about="the recording as it is (thinking off)")


def user_turn(rec: Recording, thinking: bool) -> Scenario:
    bodies = _session(rec, thinking)
    bodies.append(shapes.answer_and_ask(bodies[-1], rec.route, ANSWER, QUESTION, reasoning=thinking))
    mode = "think" if thinking else "no-think"
    about = f"the tool chain, then a user turn (thinking {'on' if thinking else 'off'})"
    return Scenario(f"user-turn/{rec.name}/{mode}", _one("a", rec.route, bodies), about=about)


def alternate(rec: Recording) -> Scenario:
    a = _session(rec)
    b = _second(a, rec.route)
    steps = [[Call(s, rec.route, body)] for pair in zip(a, b, strict=True) for s, body in zip("ab", pair, strict=True)]
    return Scenario(f"alternate/{rec.name}", steps, about="two sessions sharing the system prompt, turn about")


def concurrent(rec: Recording) -> Scenario:
    a = _session(rec)
    b = _second(a, rec.route)
    steps = [[Call("a", rec.route, x), Call("b", rec.route, y)] for x, y in zip(a, b, strict=True)]
    return Scenario(f"concurrent/{rec.name}", steps, about="two sessions, each step's requests in flight at once")


def side(rec: Recording) -> Scenario:
    steps: list[list[Call]] = []
    for n, body in enumerate(_session(rec), start=1):
        steps.append([Call("a", rec.route, body)])
        for after, kind, text in ((2, "title", TITLE), (4, "summary", SUMMARY)):
            if n == after:
                steps.append([Call(kind, rec.route, shapes.side_request(body, rec.route, text))])
    return Scenario(f"side/{rec.name}", steps, about="a title request after turn 2, a summary after turn 4")


def swap(rec: Recording, at: int = SWAP_AT) -> Scenario:
    about = f"the model unloaded and another one loaded before turn {at}"
    return Scenario(f"swap/{rec.name}", _one("a", rec.route, _session(rec)), swap_before=at, about=about)


def every_scenario(recordings: list[Recording], swap_at: int = SWAP_AT) -> list[Scenario]:
    """Every scenario of every recording, in a stable order."""
    out: list[Scenario] = []
    for rec in recordings:
        out += [replay(rec), user_turn(rec, True), user_turn(rec, False), alternate(rec), concurrent(rec)]
        out += [side(rec), swap(rec, swap_at)]
    return out


def select(scenarios: list[Scenario], patterns: list[str]) -> list[Scenario]:
    """The scenarios whose names match any of the shell patterns, in the order of the patterns.

    Raises:
        ValueError: a pattern matches none of them.
    """
    chosen: list[Scenario] = []
    for pattern in patterns:
        found = [s for s in scenarios if fnmatch.fnmatchcase(s.name, pattern)]
        if not found:
            raise ValueError(f"no scenario matches {pattern!r}")
        chosen += [s for s in found if s.name not in {c.name for c in chosen}]
    return chosen
