"""Parallel tool results put back in the order of their calls (chat, Messages, Responses).

Pure functions, no I/O. A client that runs a turn's tool calls in parallel may send the results
back in the order they finished. The Qwen3.5 template renders tool responses in the order given and
without their ids, so the model reads the second call's result as the answer to the first. When
every result of a run names a distinct call of the turn before it, the run is sorted into the
calls' order: counted as the repair ``tool_results_ordered``. A run with an id it cannot place
(unknown, missing or repeated) is left as sent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

KIND = "tool_results_ordered"


def in_call_order(results: Sequence[T], call_id: Callable[[T], Any], calls: Sequence[Any]) -> list[T] | None:
    """``results`` sorted by the position of their ``call_id`` in ``calls``, or None when they
    already are in that order or one of them cannot be placed."""
    ids = [call_id(r) for r in results]
    if len(ids) < 2 or len(set(ids)) != len(ids) or not all(isinstance(i, str) and i in calls for i in ids):
        return None
    order = sorted(range(len(results)), key=lambda k: list(calls).index(ids[k]))
    if order == list(range(len(results))):
        return None
    return [results[k] for k in order]


def order_chat(out: list[dict[str, Any]], add: Callable[[str], None]) -> bool:
    """Each run of chat ``tool`` messages put in the order of the ``tool_calls`` before it (in
    place); whether any moved (then :data:`KIND` is passed to ``add``)."""
    moved = False
    for i, msg in enumerate(out):
        calls = msg.get("tool_calls") if msg["role"] == "assistant" else None
        if not isinstance(calls, list):
            continue
        end = i + 1
        while end < len(out) and out[end]["role"] == "tool":
            end += 1
        ids = [c.get("id") if isinstance(c, dict) else None for c in calls]
        ordered = in_call_order(out[i + 1 : end], lambda m: m.get("tool_call_id"), ids)
        if ordered is not None:
            out[i + 1 : end] = ordered
            moved = True
    if moved:
        add(KIND)
    return moved


def order_anthropic(out: list[dict[str, Any]]) -> bool:
    """The ``tool_result`` blocks of the user turn after each assistant turn with ``tool_use``
    blocks put in the order of those calls (in place); whether any moved."""
    moved = False
    for i in range(1, len(out)):
        prev, turn = out[i - 1], out[i]
        if prev["role"] != "assistant" or turn["role"] != "user" or not isinstance(turn["content"], list):
            continue
        blocks = prev["content"] if isinstance(prev["content"], list) else []
        calls = [b.get("id") for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
        at = [k for k, b in enumerate(turn["content"]) if isinstance(b, dict) and b.get("type") == "tool_result"]
        ordered = in_call_order([turn["content"][k] for k in at], lambda b: b.get("tool_use_id"), calls)
        if ordered is not None:
            content = list(turn["content"])
            for k, block in zip(at, ordered, strict=True):
                content[k] = block
            out[i] = {**turn, "content": content}
            moved = True
    return moved


def order_responses(out: list[Any]) -> bool:
    """Each run of Responses ``function_call_output`` items put in the order of the turn's
    ``function_call`` items before it (in place); whether any moved."""
    moved, i = False, 0
    calls: list[Any] = []
    while i < len(out):
        itype = out[i].get("type")
        if itype == "function_call_output":
            end = i
            while end < len(out) and out[end].get("type") == "function_call_output":
                end += 1
            ordered = in_call_order(out[i:end], lambda item: item.get("call_id"), calls)
            if ordered is not None:
                out[i:end] = ordered
                moved = True
            calls, i = [], end
            continue
        if itype == "function_call":
            calls.append(out[i].get("call_id"))
        elif itype != "reasoning":
            calls = []  # a message ends the turn's calls
        i += 1
    return moved
