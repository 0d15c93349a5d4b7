"""models.yaml problems, located: file, line, key path, what is wrong, and what to do.

``load_config`` (in ``orchestrator.config.schema``) reads the YAML with ruamel's round-trip loader,
maps every key path to its line (``_collect_lines``) and hands pydantic a plain copy
(``_plain``). When validation fails, ``_problems`` turns each pydantic error into one
``Problem``::

    models.yaml:14: models[0].speculative.n_min: must be <= n_max (3)

with a hint: a "did you mean" for misspelt keys and values, the section an unknown key
belongs to, or an entry of the ``_HINTS`` table. Validators point at the exact key with
``_located(at, message)``. ``ConfigError`` (a ``UserError``) carries the problems, one per line.
"""

from __future__ import annotations

import difflib
import re
import typing
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

from orchestrator.errors import UserError


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


def _located(at: str, message: str) -> PydanticCustomError:
    """A validation error for the key ``at`` (``/``-separated, relative to the validated object).

    Model validators are located at the model; ``at`` lets them point at the exact key.
    """
    return PydanticCustomError("orchestrator", message.replace("{", "(").replace("}", ")"), {"at": at})


_UNIQUE_MSG = "model names and aliases must be unique"


def _read_yaml(path: Path) -> Any:
    """The round-trip YAML mapping of ``path``; every way reading it fails is a located ``ConfigError``."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    name = str(path)
    if not path.exists():
        raise ConfigError(
            [
                Problem(
                    name,
                    None,
                    "",
                    "no such file",
                    "create it (the repository's models.yaml is an example) or pass --config PATH",
                )
            ]
        )
    if path.is_dir():
        raise ConfigError(
            [Problem(name, None, "", "is a directory, not a YAML file", "pass --config path/to/models.yaml")]
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(
            [Problem(name, None, "", f"cannot read: {err}", "check the file's permissions and encoding (UTF-8)")]
        ) from None
    yaml = YAML(typ="rt")
    try:
        data = yaml.load(text)
    except MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark is not None else None
        what = " ".join(x for x in (err.context, err.problem) if x)
        raise ConfigError(
            [
                Problem(
                    name,
                    line,
                    "",
                    f"YAML syntax error: {what}",
                    "fix the YAML at that line (indentation, quotes, ':' after keys)",
                )
            ]
        ) from None
    except YAMLError as err:
        raise ConfigError([Problem(name, None, "", f"YAML error: {err}", "fix the YAML syntax")]) from None
    except RecursionError:
        raise ConfigError(
            [Problem(name, None, "", "YAML nested too deeply to read", "a models.yaml needs only a few levels")]
        ) from None
    if data is None:
        raise ConfigError(
            [
                Problem(
                    name,
                    None,
                    "",
                    "is empty",
                    "add a `models:` list, e.g. `models: [{name: demo, path: 'builtin:tiny-mtp'}]`",
                )
            ]
        )
    if not isinstance(data, dict):
        raise ConfigError(
            [
                Problem(
                    name,
                    1,
                    "",
                    f"the top level must be a mapping with a `models:` key, not a {_yaml_kind(data)}",
                    "start the file with `models:`",
                )
            ]
        )
    return data


def _yaml_kind(node: Any) -> str:
    """``"list"``, ``"string"``, ... for a loaded YAML node (ruamel's class names mean nothing to users)."""
    if isinstance(node, list):
        return "list"
    if isinstance(node, str):
        return f"string ({str(node)[:40]!r})"
    if isinstance(node, bool) or type(node).__name__ == "ScalarBoolean":
        return "boolean"
    if isinstance(node, (int, float)):
        return "number"
    return type(node).__name__


def _plain(node: Any) -> Any:
    """ruamel round-trip nodes -> plain dict/list/str/int/float/bool for pydantic."""
    if isinstance(node, dict):
        return {str(k) if not isinstance(k, (int, float, bool)) or k is None else k: _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    # ScalarBoolean subclasses int and keeps its truth value
    if type(node).__name__ == "ScalarBoolean":
        return bool(node)
    for base in (str, int, float):
        if isinstance(node, base):
            return base(node)
    return node


def _collect_lines(data: Any) -> dict[tuple[str | int, ...], int]:
    """Map every key path to its 1-based line (mapping keys via ``lc.key``, items via ``lc.item``)."""
    out: dict[tuple[str | int, ...], int] = {}

    def walk(node: Any, loc: tuple[str | int, ...]) -> None:
        lc = getattr(node, "lc", None)
        if isinstance(node, dict):
            for k, v in node.items():
                sub = loc + (str(k),)
                if lc is not None:
                    try:
                        out[sub] = lc.key(k)[0] + 1
                    except (KeyError, TypeError):
                        pass
                walk(v, sub)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                sub = loc + (i,)
                if lc is not None:
                    try:
                        out[sub] = lc.item(i)[0] + 1
                    except (KeyError, TypeError, IndexError):
                        pass
                walk(v, sub)

    walk(data, ())
    return out


def _nearest_line(lines: dict[tuple[str | int, ...], int], loc: tuple[str | int, ...]) -> int | None:
    """Line of ``loc`` or of its nearest ancestor present in the file (1 for the top level)."""
    for n in range(len(loc), 0, -1):
        line = lines.get(tuple(loc[:n]))
        if line is not None:
            return line
    return 1 if lines else None


def _model_at(loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The pydantic model class that holds the last key of ``loc`` (for 'allowed keys' lists)."""
    from orchestrator.config.schema import Config  # config.py imports this module

    cls: type[BaseModel] = Config
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


@cache
def _section_names() -> dict[type[BaseModel], str]:
    from orchestrator.config.schema import BuildConfig, ModelConfig, ServerConfig, SpeculativeConfig, Timeouts

    return {
        ServerConfig: "server",
        Timeouts: "server.timeouts",
        BuildConfig: "build",
        ModelConfig: "a model entry (models[i])",
        SpeculativeConfig: "models[i].speculative",
    }


def _section_of(key: str) -> type[BaseModel] | None:
    for cls in _section_names():
        if key in cls.model_fields:
            return cls
    return None


def _problem_unknown(
    name: str, lines: dict[tuple[str | int, ...], int], loc: tuple[str | int, ...], cls: type[BaseModel] | None
) -> Problem:
    key = str(loc[-1])
    allowed = [k for k, f in cls.model_fields.items() if not f.exclude] if cls is not None else []
    near = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    hint = f"did you mean `{near[0]}`? " if near else ""
    home = _section_of(key)
    if not near and home is not None and home is not cls:
        hint = f"`{key}` belongs under {_section_names()[home]}; "
    if allowed:
        hint += "allowed here: " + ", ".join(allowed)
    return Problem(name, _nearest_line(lines, loc), format_loc(loc), f"unknown key `{key}`", hint or None)


_HINTS: dict[tuple[str, ...], str] = {
    ("speculative", "n_min"): "lower n_min or raise n_max",
    ("models",): "add at least one model: `- {name: demo, path: 'builtin:tiny-mtp'}`",
    ("name",): "use letters, digits, '.', '_' and '-' (it becomes the model id and instance name)",
    ("path",): "give a .gguf path (relative to this file) or 'builtin:tiny-mtp'",
    ("gpus",): "write `auto` or a list of GPU indices such as [0] or [0, 1]",
    ("replicas",): "write a count such as 2, or one GPU list per replica such as [[0], [1]]",
    ("port",): "pick a port between 1 and 65535, or leave it out for an OS-picked one",
}


def _problems(name: str, lines: dict[tuple[str | int, ...], int], err: ValidationError, data: Any) -> list[Problem]:
    """One ``Problem`` per pydantic error; union branches collapse into the branch that matched."""
    grouped: dict[tuple[str | int, ...], list[tuple[tuple[str | int, ...], dict[str, Any]]]] = {}
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
            for tail, e in deep:
                problems.append(_one(name, lines, loc + tail[1:], e))
            continue
        if len(entries) == 1:
            problems.append(_one(name, lines, loc, entries[0][1]))
            continue
        msgs = []
        for _, e in entries:
            m = _clean_msg(e)
            if m not in msgs:
                msgs.append(m)
        got = entries[0][1].get("input")
        problems.append(
            Problem(
                name, _nearest_line(lines, loc), format_loc(loc), " or ".join(msgs) + f" (got {got!r})", _hint_for(loc)
            )
        )
    return problems


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


def _clean_msg(e: dict[str, Any]) -> str:
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


def _one(name: str, lines: dict[tuple[str | int, ...], int], loc: tuple[str | int, ...], e: dict[str, Any]) -> Problem:
    kind = e["type"]
    if kind == "extra_forbidden":
        return _problem_unknown(name, lines, loc, _model_at(loc))
    if kind == "missing":
        parent = loc[:-1]
        return Problem(
            name,
            _nearest_line(lines, parent),
            format_loc(loc),
            "required key missing",
            _hint_for(loc) or f"add `{loc[-1]}:`",
        )
    msg = _clean_msg(e)
    hint = _hint_for(loc)
    if kind == "orchestrator" and _UNIQUE_MSG in msg:
        hint = "rename one of them or drop the duplicate alias"
    if kind == "literal_error" and isinstance(e.get("input"), str):
        expected = re.findall(r"'([^']*)'", str(e.get("ctx", {}).get("expected", "")))
        near = difflib.get_close_matches(e["input"], expected, n=1)
        if near:
            hint = f"did you mean {near[0]!r}?"
    if kind not in ("orchestrator", "value_error") and "input" in e and not isinstance(e["input"], (dict, list)):
        msg += f" (got {e['input']!r})"
    return Problem(name, _nearest_line(lines, loc), format_loc(loc), msg, hint)


def _dedupe(problems: list[Problem]) -> list[Problem]:
    seen: set[str] = set()
    out = []
    for p in problems:
        if str(p) not in seen:
            seen.add(str(p))
            out.append(p)
    return out
