"""A client's config file edited in place: only our keys change, everything else (comments,
other providers, other settings) stays; the file as it was is copied aside first."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from typing import Any

import tomlkit
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError
from tomlkit.exceptions import TOMLKitError

from orchestrator.errors import UserError


def backup(path: Path) -> Path | None:
    """Copy ``path`` to ``<path>.orchestrator-<UTC time>.bak`` (None when it does not exist yet)."""
    if not path.exists():
        return None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    copy = path.with_name(f"{path.name}.orchestrator-{stamp}.bak")
    shutil.copy2(path, copy)
    return copy


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8") if path.exists() else ""
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read {path}: {err}", hint="fix or move the file, then run again") from None


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".orchestrator-tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _unreadable(path: Path, err: Exception) -> UserError:
    return UserError(f"{path} is not valid ({err}); left unchanged", hint="fix the file by hand, then run again")


def merge_json(path: Path, update: dict[str, Any]) -> None:
    """Deep-merge ``update`` into the JSON object in ``path`` (created when missing)."""
    text = _read(path)
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError as err:
        raise _unreadable(path, err) from None
    if not isinstance(data, dict):
        raise _unreadable(path, ValueError("not a JSON object"))
    _write(path, json.dumps(_deep(data, update), indent=2) + "\n")


def _deep(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep(base[key], value)
        else:
            base[key] = value
    return base


def merge_toml(path: Path, top: Mapping[str, object], tables: Mapping[str, Mapping[str, object]]) -> None:
    """Set top-level keys ``top`` and, in each dotted table of ``tables`` (``model_providers.x``),
    its keys (a None value removes the key), in the TOML file ``path`` (created when missing),
    keeping its comments and everything else."""
    try:
        doc = tomlkit.parse(_read(path))
    except TOMLKitError as err:
        raise _unreadable(path, err) from None
    for key, value in top.items():
        doc[key] = value  # tomlkit puts a new top-level key before the first table
    for dotted, values in tables.items():
        table: Any = doc
        *outer, last = dotted.split(".")
        for part in outer:
            if part not in table:
                table[part] = tomlkit.table(is_super_table=True)
            table = table[part]
        if last not in table:
            table[last] = tomlkit.table()
        for key, value in values.items():
            if value is None:
                table[last].pop(key, None)
            else:
                table[last][key] = value
    _write(path, tomlkit.dumps(doc))


def yaml_lines(data: Mapping[str, Any]) -> list[str]:
    """``data`` as the YAML lines ``merge_yaml_list`` would write, to print for pasting."""
    out = StringIO()
    YAML().dump(dict(data), out)
    return out.getvalue().splitlines()


def merge_yaml_list(path: Path, top: dict[str, Any], list_key: str, item: dict[str, Any], match: str) -> None:
    """In the YAML mapping in ``path`` (created when missing): set ``top`` keys that are absent,
    and put ``item`` in the list ``list_key``, replacing the entry with the same ``match`` value."""
    yaml = YAML()
    try:
        data = yaml.load(_read(path)) or {}
    except YAMLError as err:
        raise _unreadable(path, err) from None
    if not isinstance(data, dict):
        raise _unreadable(path, ValueError("not a mapping"))
    for key, value in top.items():
        data.setdefault(key, value)
    entries = data.get(list_key) or []
    kept = [e for e in entries if not (isinstance(e, dict) and e.get(match) == item[match])]
    data[list_key] = [*kept, item]
    out = StringIO()
    yaml.dump(data, out)
    _write(path, out.getvalue())
