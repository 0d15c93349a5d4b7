"""What a request body may hold, per API: checked once, before any repair, translation or forwarding.

Pure functions on values. Every route's body goes through :func:`check` right after it is parsed
(``serve/http/body.py``), so a client's mistake anywhere in it is a 4xx in its API's shape and never
reaches code that assumes a type (an Ollama message with ``"tool_calls": 5`` was a 500) or a
llama-server that would work on it for minutes (400,000 one-word messages held a core for 600 s).
It checks three kinds of things, in this order:

1. **numbers of any size**: an integer beyond 64 bits anywhere in the body (``"seed": 1`` and 400
   zeros) fits no field of any API and overflows every float conversion: a 400 naming where.
   Found by a scan of the raw bytes first, so bodies without such digit runs pay nothing.
2. **bounds** (``server.request_limits``, :class:`Limits`): messages (or Responses input items),
   content parts over the whole history, text characters in the history, tools and the JSON
   size of their definitions; past one, 413 ``request_too_large`` naming the limit. The lists'
   lengths are checked before anything walks them.
3. **shapes** (each API folder's ``shapes.py``, declared by its adapters): the type of every field each
   API defines, down through nested
   history (messages, content parts, images, tool calls, tool results, Responses items, Ollama
   messages); a wrong type is a 400 naming the path (``messages[3].tool_calls``). Fields a shape
   does not name are left to the API's own checks (``llama_fields``, the repairs), which look
   only at the top level; a shape never refuses what the API accepts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import ApiError

# Integers a JSON field may hold: int64 and uint64 (llama-server's seed is uint32, ids int32)
INT_MIN, INT_MAX = -(2**63), 2**64 - 1
# A run of 20 digits is where an integer can pass 64 bits: found by mapping every digit to "1" and
# everything else to "0" (C speed; a regex for the run was ten times slower on an 80 KB body)
_DIGITS = bytes(0x31 if 0x30 <= b <= 0x39 else 0x30 for b in range(256))
_RUN = b"1" * 20


@dataclass(frozen=True)
class Limits:
    """Bounds on one request body (models.yaml ``server.request_limits``)."""

    messages: int = 10_000
    content_parts: int = 50_000
    text_chars: int = 16 * 1024 * 1024
    tools: int = 512
    tool_schema_bytes: int = 1024 * 1024


@dataclass(frozen=True)
class Shape:
    """The JSON kinds a value may have, and for objects and arrays what they hold.

    Attributes:
        kinds: ``string``, ``number`` (integers too), ``integer``, ``boolean``, ``null``,
            ``object``, ``array``.
        fields: an object's known keys (others are not checked).
        items: an array's items.
        counted: the :class:`Limits` field an array's length counts toward (``messages``,
            ``content_parts``, ``tools``).
    """

    kinds: frozenset[str]
    fields: Mapping[str, Shape] = field(default_factory=dict)
    items: Shape | None = None
    counted: str | None = None

    def __or__(self, other: Shape) -> Shape:
        return Shape(
            self.kinds | other.kinds,
            {**self.fields, **other.fields},
            self.items or other.items,
            self.counted or other.counted,
        )


def _kinds(*names: str) -> Shape:
    return Shape(frozenset(names))


STR, NUM, INT, BOOL, NULL = _kinds("string"), _kinds("number"), _kinds("integer"), _kinds("boolean"), _kinds("null")
OBJ, ARR = _kinds("object"), _kinds("array")


def obj(**fields: Shape) -> Shape:
    """An object whose named keys have these shapes."""
    return Shape(frozenset({"object"}), fields)


def arr(items: Shape, counted: str | None = None) -> Shape:
    """An array of ``items``; its length counts toward the ``counted`` limit."""
    return Shape(frozenset({"array"}), items=items, counted=counted)


def _kind(value: Any) -> str:
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if value is None:
        return "null"
    return "object" if isinstance(value, dict) else "array"


_NAMES = {
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "true or false",
    "null": "null",
    "object": "an object",
    "array": "an array",
}


def _expected(kinds: frozenset[str]) -> str:
    order = [k for k in _NAMES if k in kinds and not (k == "integer" and "number" in kinds)]
    return " or ".join(_NAMES[k] for k in order)


class _Walk:
    """One walk of a body against its shape, counting toward the limits."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.parts = 0
        self.chars = 0

    def visit(self, value: Any, shape: Shape, path: str) -> None:
        kind = _kind(value)
        if kind not in shape.kinds and not (kind == "integer" and "number" in shape.kinds):
            got = "a boolean" if kind == "boolean" else _NAMES[kind]  # not "or false" from "true or false"
            raise ApiError(400, f"{path}: must be {_expected(shape.kinds)}, not {got}", param=path)
        if kind == "string":
            self.chars += len(value)
            if self.chars > self.limits.text_chars:
                raise _over("text_chars", self.limits.text_chars, "characters of text", path)
        elif kind == "object" and shape.fields:
            for key, sub in shape.fields.items():
                if key in value:
                    self.visit(value[key], sub, f"{path}.{key}" if path else key)
        elif kind == "array" and shape.items is not None:
            if shape.counted == "content_parts":
                self.parts += len(value)
                if self.parts > self.limits.content_parts:
                    raise _over("content_parts", self.limits.content_parts, "content parts", path)
            for i, item in enumerate(value):
                self.visit(item, shape.items, f"{path}[{i}]")


def _over(limit: str, bound: int, what: str, path: str) -> ApiError:
    return ApiError(
        413,
        f"{path}: more than {bound} {what} in one request (server.request_limits.{limit}); "
        "send less, or raise the limit in models.yaml",
        param=path,
        code="request_too_large",
    )


def huge_integer(value: Any, path: str = "") -> str | None:
    """The path of the first integer in ``value`` beyond 64 bits, else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return path if not INT_MIN <= value <= INT_MAX else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = huge_integer(item, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}".lstrip("."))
        if found is not None:
            return found
    return None


def _check_numbers(body: dict[str, Any], raw: bytes) -> None:
    if _RUN not in raw.translate(_DIGITS):
        return
    where = huge_integer(body)
    if where is not None:
        raise ApiError(
            400,
            f"{where}: an integer of more than 64 bits fits no field; send a number in the field's range",
            param=where,
        )


def _tool_count(tools: list[Any]) -> int:
    # a Responses namespace tool holds functions of its own, each one more function for the template
    inner = (t.get("tools") for t in tools if isinstance(t, dict))
    return len(tools) + sum(len(sub) for sub in inner if isinstance(sub, list))


def _check_lengths(body: dict[str, Any], raw: bytes, shape: Shape, limits: Limits) -> None:
    """The counted top-level lists, by length alone (before any walk)."""
    for key, sub in shape.fields.items():
        value = body.get(key)
        counted = sub.counted if sub.items is not None else None
        if counted in ("messages", "tools") and isinstance(value, list):
            bound = getattr(limits, counted)
            if (len(value) if counted == "messages" else _tool_count(value)) > bound:
                raise _over(counted, bound, "messages or input items" if counted == "messages" else "tools", key)
    tools = body.get("tools")
    # the tools cannot be larger than the whole body: serialised only when the body could hold too many
    if isinstance(tools, list) and tools and len(raw) > limits.tool_schema_bytes:
        size = len(json.dumps(tools, ensure_ascii=False))
        if size > limits.tool_schema_bytes:
            raise _over("tool_schema_bytes", limits.tool_schema_bytes, "bytes of tool definitions", "tools")


def check(body: dict[str, Any], raw: bytes, shape: Shape | None, limits: Limits) -> None:
    """Check a parsed body (``raw``: its UTF-8 bytes) against its route's ``shape`` and ``limits``.

    Args:
        body: the parsed JSON object.
        raw: the bytes it was parsed from (scanned for long digit runs).
        shape: the route's shape (its adapter's ``shape``); None checks numbers only.
        limits: the bounds.

    Raises:
        ApiError: 400 for an integer beyond 64 bits or a wrong type, naming the path; 413 past
            a limit, naming it.
    """
    _check_numbers(body, raw)
    if shape is None:
        return
    _check_lengths(body, raw, shape, limits)
    _Walk(limits).visit(body, shape, "")
