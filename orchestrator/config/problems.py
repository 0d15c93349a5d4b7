"""models.yaml problems, located: file, line, key path, what is wrong, and what to do.

``orchestrator.config.load`` reads the YAML with ruamel's round-trip loader, maps every key
path to its line and hands pydantic a plain copy. When validation fails,
``problems_from_validation`` turns each pydantic error into one ``Problem``::

    models.yaml:14: models[0].speculative.n_min: must be <= n_max (3)

with a hint: a "did you mean" for misspelt keys and values, the section an unknown key
belongs to, or an entry of the ``_HINTS`` table. Validators point at the exact key with
``located(at, message)``. ``ConfigError`` (a ``UserError``) carries the problems, one per line.
This module knows no model class: the caller passes the root model and the section names.
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

from orchestrator.errors import UserError

#: key path (``("models", 0, "path")``) -> 1-based line in the YAML file
Lines = dict[tuple[str | int, ...], int]


@dataclass(frozen=True)
class Problem:
    """One located config problem: ``"{file}:{line}: {key}: {message}"`` plus a hint."""

    file: str
    line: int | None
    key: str
    message: str
    hint: str | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"


class ConfigError(UserError):
    """models.yaml is invalid. ``problems`` holds each located problem; str() has one per line."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        if len(problems) == 1:
            super().__init__(str(problems[0]), problems[0].hint)
        else:
            lines = [f"{len(problems)} problems in {problems[0].file}:"]
            for p in problems:
                lines.append(f"  {p}")
                if p.hint:
                    lines.append(f"      fix: {p.hint}")
            super().__init__(
                "\n".join(lines), "fix each key above; an editor with the YAML schema shows them as you type"
            )


def format_loc(loc: tuple[str | int, ...] | list[str | int]) -> str:
    """``("models", 0, "speculative", "n_min")`` -> ``"models[0].speculative.n_min"``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", part):
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out


def located(at: str, message: str) -> PydanticCustomError:
    """A validation error for the key ``at`` (``/``-separated, relative to the validated object).

    Model validators are located at the model; ``at`` lets them point at the exact key.
    """
    return PydanticCustomError("orchestrator", message.replace("{", "(").replace("}", ")"), {"at": at})


#: the message of the duplicate-name check; its problem gets its own hint
UNIQUE_MSG = "model names and aliases must be unique"


def nearest_line(lines: Lines, loc: tuple[str | int, ...]) -> int | None:
    """Line of ``loc`` or of its nearest ancestor present in the file (1 for the top level)."""
    for n in range(len(loc), 0, -1):
        line = lines.get(tuple(loc[:n]))
        if line is not None:
            return line
    return 1 if lines else None


@dataclass(frozen=True)
class Source:
    """What locating a problem needs: the file name, the line of every key path, the root
    pydantic model of the file, and a readable name per section model (for "belongs under")."""

    file: str
    lines: Lines
    root: type[BaseModel]
    sections: Mapping[type[BaseModel], str]


def _model_at(src: Source, loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The pydantic model class that holds the last key of ``loc`` (for 'allowed keys' lists)."""
    cls: type[BaseModel] = src.root
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = cls.model_fields.get(part)
        if field is None:
            return None
        sub = _find_model(field.annotation)
        if sub is None:
            return None
        cls = sub
    return cls


def _find_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _find_model(arg)
        if found is not None:
            return found
    return None


def _section_of(src: Source, key: str) -> type[BaseModel] | None:
    for cls in src.sections:
        if key in cls.model_fields:
            return cls
    return None


def problem_unknown(src: Source, loc: tuple[str | int, ...], cls: type[BaseModel] | None) -> Problem:
    """The problem for an unknown key at ``loc`` inside model ``cls``: a "did you mean", the
    section the key belongs to, and the keys allowed here."""
    key = str(loc[-1])
    allowed = [k for k, f in cls.model_fields.items() if not f.exclude] if cls is not None else []
    near = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    hint = f"did you mean `{near[0]}`? " if near else ""
    home = _section_of(src, key)
    if not near and home is not None and home is not cls:
        hint = f"`{key}` belongs under {src.sections[home]}; "
    if allowed:
        hint += "allowed here: " + ", ".join(allowed)
    return Problem(src.file, nearest_line(src.lines, loc), format_loc(loc), f"unknown key `{key}`", hint or None)


_HINTS: dict[tuple[str, ...], str] = {
    ("speculative", "n_min"): "lower n_min or raise n_max",
    ("models",): "add at least one model: `- {name: demo, path: 'builtin:tiny-mtp'}`",
    ("name",): "use letters, digits, '.', '_' and '-' (it becomes the model id and instance name)",
    (
        "path",
    ): "give a .gguf path (relative to this file), 'builtin:tiny-mtp', or 'hf:OWNER/NAME:QUANT' (a Hugging Face repo)",
    ("gpus",): "write `auto` or a list of GPU indices such as [0] or [0, 1]",
    ("replicas",): "write a count such as 2, or one GPU list per replica such as [[0], [1]]",
    ("port",): "pick a port between 1 and 65535, or leave it out for an OS-picked one",
    ("speculative", "type"): "use draft-mtp (alias mtp), ngram-mod, a list of both, or none",
}

#: what to write instead, by pydantic's error type, for a key the table above does not name
_TYPE_HINTS: dict[str, str] = {
    "int_parsing": "write a whole number without quotes or units: 65536, not 64k",
    "int_type": "write a whole number without quotes or units: 65536, not 64k",
    "int_from_float": "write a whole number",
    "float_parsing": "write a number without quotes or units, e.g. 0.5",
    "float_type": "write a number without quotes or units, e.g. 0.5",
    "bool_parsing": "write true or false",
    "bool_type": "write true or false",
    "string_type": "write text (quote it if it looks like a number or a list)",
    "list_type": "write a list, e.g. [a, b] or one `- item` per line",
    "dict_type": "write a mapping: `key: value` lines indented under this key",
    "model_type": "write a mapping: `key: value` lines indented under this key",
}


def problems_from_validation(src: Source, err: ValidationError, data: Any) -> list[Problem]:
    """One ``Problem`` per pydantic error of validating ``data`` (the plain copy of the YAML);
    union branches collapse into the branch that matched; duplicates are dropped."""
    grouped: dict[tuple[str | int, ...], list[tuple[tuple[str | int, ...], Mapping[str, Any]]]] = {}
    order: list[tuple[str | int, ...]] = []
    for e in err.errors(include_url=False):
        loc, tail = _split_union_loc(tuple(e["loc"]), data)
        ctx = e.get("ctx") or {}
        if e["type"] == "orchestrator" and ctx.get("at"):
            loc = loc + tuple(int(p) if p.isdigit() else p for p in str(ctx["at"]).split("/"))
        if loc not in grouped:
            grouped[loc] = []
            order.append(loc)
        grouped[loc].append((tail, e))
    problems: list[Problem] = []
    for loc in order:
        entries = grouped[loc]
        deep = [(t, e) for t, e in entries if len(t) > 1]
        if deep:
            # the input had the container type of that branch: report inside it
            for tail, detail in deep:
                problems.append(_one(src, loc + tail[1:], detail))
            continue
        if len(entries) == 1:
            problems.append(_one(src, loc, entries[0][1]))
            continue
        msgs = []
        for _, detail in entries:
            m = _clean_msg(detail)
            if m not in msgs:
                msgs.append(m)
        got = entries[0][1].get("input")
        problems.append(
            Problem(
                src.file,
                nearest_line(src.lines, loc),
                format_loc(loc),
                " or ".join(msgs) + f" (got {got!r})",
                _hint_for(loc),
            )
        )
    return dedupe(problems)


def _split_union_loc(loc: tuple[str | int, ...], data: Any) -> tuple[tuple[str | int, ...], tuple[str | int, ...]]:
    """Cut pydantic's union tags (e.g. ``'list[int]'``) out of a loc: (key path, (tag, rest...))."""
    node = data
    for i, part in enumerate(loc):
        if isinstance(part, int):
            if isinstance(node, list) and 0 <= part < len(node):
                node = node[part]
                continue
            return loc[:i], loc[i:]
        if isinstance(node, dict):
            if part in node:
                node = node[part]
                continue
            # a missing or unknown key: the loc ends here
            if i == len(loc) - 1:
                return loc, ()
            return loc[:i], loc[i:]
        return loc[:i], loc[i:]
    return loc, ()


def _clean_msg(e: Mapping[str, Any]) -> str:
    msg = str(e["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    msg = re.sub(r"^(Input|String|List|Dictionary|Value|Tuple|Object) should", "should", msg)
    msg = msg.replace(" after validation", "")
    return msg[:1].lower() + msg[1:] if msg[:2] != msg[:2].upper() else msg


def _hint_for(loc: tuple[str | int, ...]) -> str | None:
    keys = tuple(p for p in loc if isinstance(p, str))
    for n in range(len(keys), 0, -1):
        hint = _HINTS.get(keys[-n:]) if n <= len(keys) else None
        if hint:
            return hint
    return None


def _one(src: Source, loc: tuple[str | int, ...], e: Mapping[str, Any]) -> Problem:
    kind = e["type"]
    if kind == "extra_forbidden":
        return problem_unknown(src, loc, _model_at(src, loc))
    if kind == "missing":
        parent = loc[:-1]
        return Problem(
            src.file,
            nearest_line(src.lines, parent),
            format_loc(loc),
            "required key missing",
            _hint_for(loc) or f"add `{loc[-1]}:`",
        )
    msg = _clean_msg(e)
    hint = _hint_for(loc)
    if kind == "orchestrator" and UNIQUE_MSG in msg:
        hint = "rename one of them or drop the duplicate alias"
    if kind == "literal_error" and isinstance(e.get("input"), str):
        expected = re.findall(r"'([^']*)'", str(e.get("ctx", {}).get("expected", "")))
        near = difflib.get_close_matches(e["input"], expected, n=1)
        if near:
            hint = f"did you mean {near[0]!r}?"
    if hint is None:
        hint = _TYPE_HINTS.get(kind)
    if kind not in ("orchestrator", "value_error") and "input" in e and not isinstance(e["input"], (dict, list)):
        msg += f" (got {e['input']!r})"
    return Problem(src.file, nearest_line(src.lines, loc), format_loc(loc), msg, hint)


def dedupe(problems: list[Problem]) -> list[Problem]:
    """``problems`` without repeats (same text), in order."""
    seen: set[str] = set()
    out = []
    for p in problems:
        if str(p) not in seen:
            seen.add(str(p))
            out.append(p)
    return out
