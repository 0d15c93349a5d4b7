"""Load models.yaml: read it with line numbers, validate it, report every problem located.

``load_config(path)`` reads the file with ruamel.yaml's round-trip loader (so every key keeps
its line number), validates a plain copy with the pydantic models of ``schema`` and turns
every validation problem into one line of a ``ConfigError`` (see ``problems``).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError

from orchestrator.config.problems import (
    ConfigError,
    Lines,
    Problem,
    Source,
    dedupe,
    problem_unknown,
    problems_from_validation,
)
from orchestrator.config.schema import SECTION_NAMES, Config

_TOO_DEEP = ("YAML nested too deeply to read", "a models.yaml needs only a few levels")


def load_config(path: Path) -> Config:
    """Read and validate a models.yaml.

    Args:
        path: the YAML file.
    Returns:
        the validated ``Config`` with ``config.path`` set to ``path``.
    Raises:
        ConfigError (a UserError): missing/empty file, YAML syntax error (with line), or one
        located line per validation problem (file:line: key path: what, plus the fix).
    """
    name = str(path)
    data = read_yaml(path)
    try:
        lines = collect_lines(data)
        plain = plain_data(data)
    except RecursionError:
        _fail(name, None, *_TOO_DEEP)
    src = Source(name, lines, Config, SECTION_NAMES)
    problems: list[Problem] = []
    if "path" in plain:  # Config.path is set by the loader, never by the file
        problems.append(problem_unknown(src, ("path",), Config))
        del plain["path"]
    try:
        config = Config.model_validate(plain)
    except ValidationError as err:
        problems.extend(problems_from_validation(src, err, plain))
        raise ConfigError(dedupe(problems)) from None
    if problems:
        raise ConfigError(problems)
    config.path = path
    config.set_lines(lines)
    return config


def _fail(name: str, line: int | None, message: str, hint: str) -> NoReturn:
    raise ConfigError([Problem(name, line, "", message, hint)])


def read_yaml(path: Path) -> Any:
    """The round-trip YAML mapping of ``path``.

    Raises:
        ConfigError: missing file, a folder, unreadable or not UTF-8, a YAML syntax error
            (with its line), an empty file, or a top level that is not a mapping.
    """
    name = str(path)
    if not path.exists():
        _fail(
            name, None, "no such file", "create it (the repository's models.yaml is an example) or pass --config PATH"
        )
    if path.is_dir():
        _fail(name, None, "is a directory, not a YAML file", "pass --config path/to/models.yaml")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        _fail(name, None, f"cannot read: {err}", "check the file's permissions and encoding (UTF-8)")
    data = _parse(name, text)
    if data is None:
        _fail(name, None, "is empty", "add a `models:` list, e.g. `models: [{name: demo, path: 'builtin:tiny-mtp'}]`")
    if not isinstance(data, dict):
        what = f"the top level must be a mapping with a `models:` key, not a {_yaml_kind(data)}"
        _fail(name, 1, what, "start the file with `models:`")
    return data


def _parse(name: str, text: str) -> Any:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    try:
        return YAML(typ="rt").load(text)
    except MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark is not None else None
        # an unclosed `[`, `{` or quote is found lines later: name the line where it opened too
        opened = err.context_mark.line + 1 if err.context_mark is not None else None
        where = f" (started on line {opened})" if err.context and opened and opened != line else ""
        what = " ".join(x for x in (f"{err.context}{where}" if err.context else None, err.problem) if x)
        hint = "fix the YAML at that line" + (f" or on line {opened}" if where else "")
        _fail(name, line, f"YAML syntax error: {what}", hint + " (indentation, quotes, ':' after keys, closing ] or })")
    except YAMLError as err:
        _fail(name, None, f"YAML error: {err}", "fix the YAML syntax")
    except RecursionError:
        _fail(name, None, *_TOO_DEEP)


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


def plain_data(node: Any) -> Any:
    """ruamel round-trip nodes -> plain dict/list/str/int/float/bool for pydantic."""
    if isinstance(node, dict):
        return {
            str(k) if not isinstance(k, (int, float, bool)) or k is None else k: plain_data(v) for k, v in node.items()
        }
    if isinstance(node, list):
        return [plain_data(v) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    # ScalarBoolean subclasses int and keeps its truth value
    if type(node).__name__ == "ScalarBoolean":
        return bool(node)
    for base in (str, int, float):
        if isinstance(node, base):
            return base(node)
    return node


def collect_lines(data: Any) -> Lines:
    """Map every key path to its 1-based line (mapping keys via ``lc.key``, items via ``lc.item``)."""
    out: Lines = {}

    def walk(node: Any, loc: tuple[str | int, ...]) -> None:
        lc = getattr(node, "lc", None)
        if isinstance(node, dict):
            for k, v in node.items():
                sub = (*loc, str(k))
                if lc is not None:
                    with contextlib.suppress(KeyError, TypeError):
                        out[sub] = lc.key(k)[0] + 1
                walk(v, sub)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                sub = (*loc, i)
                if lc is not None:
                    with contextlib.suppress(KeyError, TypeError, IndexError):
                        out[sub] = lc.item(i)[0] + 1
                walk(v, sub)

    walk(data, ())
    return out
