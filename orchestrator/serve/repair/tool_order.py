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
