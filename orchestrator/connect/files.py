"""A client's config file edited in place: only our keys change, everything else (comments,
other providers, other settings) stays; the file as it was is copied aside first."""

from __future__ import annotations

import copy
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


def merge_json(path: Path, update: dict[str, Any], lists: Mapping[str, str] | None = None) -> None:
    """Deep-merge ``update`` into the JSON object in ``path`` (created when missing). ``lists`` maps
    the dotted path of a list of objects (``modelProviders.openai``) to its key field: the file's
    entries with the same key as one of ``update``'s are replaced, the others kept before them."""
    text = _read(path)
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError as err:
        raise _unreadable(path, err) from None
    if not isinstance(data, dict):
        raise _unreadable(path, ValueError("not a JSON object"))
    update = copy.deepcopy(update)
    for dotted, match in (lists or {}).items():
        old, new = _at(data, dotted), _at(update, dotted)
        if isinstance(old, list) and isinstance(new, list):
            ours = {e.get(match) for e in new if isinstance(e, dict)}
            new[:0] = [e for e in old if not (isinstance(e, dict) and e.get(match) in ours)]
    _write(path, json.dumps(_deep(data, update), indent=2) + "\n")


def _at(data: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


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


def yaml_lines(data: Mapping[str, Any] | list[Any]) -> list[str]:
    """``data`` as the YAML lines the ``merge_yaml_*`` functions would write, to print for pasting."""
    out = StringIO()
    YAML().dump(dict(data) if isinstance(data, Mapping) else list(data), out)
    return out.getvalue().splitlines()


def _load_yaml(path: Path, kind: type, empty: Any) -> Any:
    try:
        data = YAML().load(_read(path))
    except YAMLError as err:
        raise _unreadable(path, err) from None
    if data is None:
        return empty
    if not isinstance(data, kind):
        raise _unreadable(path, ValueError(f"not a {'mapping' if kind is dict else 'list'}"))
    return data


def _dump_yaml(path: Path, data: Any) -> None:
    out = StringIO()
    YAML().dump(data, out)
    _write(path, out.getvalue())


def merge_yaml_map(path: Path, values: Mapping[str, Any]) -> None:
    """Set ``values`` in the YAML mapping in ``path`` (created when missing), keeping the rest."""
    data = _load_yaml(path, dict, {})
    data.update(values)
    _dump_yaml(path, data)


def merge_yaml_items(path: Path, items: list[dict[str, Any]], match: str) -> None:
    """Put ``items`` in the YAML list in ``path`` (created when missing), replacing the entries
    with the same ``match`` value and keeping the others before them."""
    data = _load_yaml(path, list, [])
    ours = {item[match] for item in items}
    _dump_yaml(path, [e for e in data if not (isinstance(e, dict) and e.get(match) in ours)] + items)


def merge_yaml_list(path: Path, top: dict[str, Any], list_key: str, item: dict[str, Any], match: str) -> None:
    """In the YAML mapping in ``path`` (created when missing): set ``top`` keys that are absent,
    and put ``item`` in the list ``list_key``, replacing the entry with the same ``match`` value."""
    data = _load_yaml(path, dict, {})
    for key, value in top.items():
        data.setdefault(key, value)
    entries = data.get(list_key) or []
    kept = [e for e in entries if not (isinstance(e, dict) and e.get(match) == item[match])]
    data[list_key] = [*kept, item]
    _dump_yaml(path, data)
