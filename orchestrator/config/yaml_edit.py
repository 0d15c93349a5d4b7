"""Edit models.yaml in place with comments and layout kept (ruamel.yaml round-trip).

Used by ``orchestrator bench --apply`` to write the recommended draft length into the model's
``speculative.n_max``. Only the touched keys change; the caller prints the unified diff.
"""

from __future__ import annotations

import difflib
import io
import os
import tempfile
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from orchestrator.errors import UserError

# (mapping, sequence, offset) indents tried in order; the first that reproduces the file
# unchanged is used to write it back, so a small edit does not reflow the whole file.
_INDENTS = ((2, 4, 2), (2, 2, 0), (4, 4, 2), (4, 6, 4), (4, 4, 0), (2, 2, 2))


def _yaml(indent: tuple[int, int, int]) -> YAML:
    y = YAML()  # round-trip mode: keeps comments, key order, quotes and flow style
    y.preserve_quotes = True
    y.width = 4096  # never re-wrap long lines
    y.indent(mapping=indent[0], sequence=indent[1], offset=indent[2])
    return y


def _dump(y: YAML, data: Any) -> str:
    buf = io.StringIO()
    y.dump(data, buf)
    return buf.getvalue()


def _load(path: Path) -> tuple[Any, str, YAML]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise UserError(f"cannot read {path}: {err.strerror}") from None
    chosen: YAML | None = None
    data: Any = None
    for indent in _INDENTS:
        y = _yaml(indent)
        try:
            data = y.load(text)
        except YAMLError as err:
            raise UserError(f"{path}: not valid YAML: {err}") from None
        if _dump(y, data) == text:
            chosen = y
            break
    if chosen is None:  # no layout reproduces it exactly: keep content, accept some reflow
        chosen = _yaml(_INDENTS[0])
        data = chosen.load(text)
    return data, text, chosen


def _find_model(data: Any, path: Path, model: str) -> CommentedMap:
    models = data.get("models") if isinstance(data, CommentedMap) else None
    if not isinstance(models, CommentedSeq):
        raise UserError(f"{path}: no `models:` list", hint="see models.yaml in the repository for the layout")
    for entry in models:
        if isinstance(entry, CommentedMap) and (entry.get("name") == model or model in (entry.get("aliases") or [])):
            return entry
    names = [str(e.get("name")) for e in models if isinstance(e, CommentedMap)]
    raise UserError(f"{path}: no model named {model!r}", hint=f"models here: {', '.join(names) or 'none'}")


def _delete_keeping_comments(mapping: CommentedMap, key: str) -> None:
    """Delete ``key`` but keep the full-line comments that follow it.

    ruamel.yaml stores the comment lines after a key (up to the next key, or to the end of the
    file for the last key) on that key, so a plain ``del`` also drops them: a commented-out
    model entry below the edited block would vanish. The deleted line's own end-of-line comment
    goes with it; the lines after it move to the key before (or after) it.
    """
    keys = list(mapping.keys())
    slot = mapping.ca.items.pop(key, None)
    del mapping[key]
    token = slot[2] if slot and len(slot) > 2 else None
    if token is None or not mapping:
        return
    value: str = token.value
    rest = value[value.index("\n") :] if not value.startswith("\n") and "\n" in value else value
    if not value.startswith("\n") and "\n" not in value:
        return  # only the deleted line's own comment
    idx = keys.index(key)
    owner = keys[idx - 1] if idx > 0 else next(iter(mapping))
    current = mapping.ca.items.get(owner)
    if current and len(current) > 2 and current[2] is not None:
        current[2].value = current[2].value.rstrip("\n") + rest
        return
    token.value = rest
    mapping.ca.items.setdefault(owner, [None, None, None, None])
    mapping.ca.items[owner][2] = token


def set_draft_length(path: Path, model: str, k: int) -> str:
    """Write draft length ``k`` (tokens) into ``model``'s ``speculative`` block of ``path``.

    - ``k >= 1``: sets ``speculative.n_max: k`` (creating the block if needed), lowers ``n_min``
      to ``k`` when it was larger (config rule n_min <= n_max), and drops ``type: none``.
    - ``k == 0``: speculation loses, so sets ``speculative.type: none`` and removes ``n_max``,
      ``n_min`` and ``p_min`` (which config rejects together with ``type: none``).

    Comments, key order and quoting elsewhere are kept. The file is replaced atomically.

    Args:
        path: the models.yaml to edit.
        model: model name (or one of its aliases).
        k: draft length in tokens, >= 0.

    Returns:
        The unified diff of the change ("" when the file already said so).

    Raises:
        UserError: unreadable or invalid YAML, no ``models`` list, no such model, or a file that
            cannot be written (full or read-only disk, no rights).
        ValueError: ``k < 0``.
    """
    if k < 0:
        raise ValueError(f"draft length must be >= 0, got {k}")
    data, before, y = _load(path)
    entry = _find_model(data, path, model)
    spec = entry.get("speculative")
    if not isinstance(spec, CommentedMap):
        spec = CommentedMap()
        entry["speculative"] = spec
    if k == 0:
        spec["type"] = "none"
        for key in ("n_max", "n_min", "p_min"):
            if key in spec:
                _delete_keeping_comments(spec, key)
    else:
        spec["n_max"] = k
        if spec.get("type") == "none":
            _delete_keeping_comments(spec, "type")
        n_min = spec.get("n_min")
        if isinstance(n_min, int) and n_min > k:
            spec["n_min"] = k
    return _write_diff(path, before, _dump(y, data), "the recommended K is printed above")


def set_launch_settings(path: Path, model: str, *, ubatch_size: int | None, backend_sampling: bool | None) -> str:
    """Write ``orchestrator tune``'s winners into ``model``'s entry of ``path``: ``ubatch_size`` (None
    removes it: llama-server's default) and ``speculative.backend_sampling`` (True or False is written
    as it is, since each passes its own flag; None leaves the key as it is). Comments and order
    elsewhere are kept; the file is replaced atomically.

    Returns:
        The unified diff of the change ("" when the file already said so).

    Raises:
        UserError: as :func:`set_draft_length`.
    """
    data, before, y = _load(path)
    entry = _find_model(data, path, model)
    if ubatch_size is not None:
        entry["ubatch_size"] = ubatch_size
    elif "ubatch_size" in entry:
        _delete_keeping_comments(entry, "ubatch_size")
    spec = entry.get("speculative")
    if backend_sampling is not None:
        if not isinstance(spec, CommentedMap):
            spec = entry["speculative"] = CommentedMap()
        spec["backend_sampling"] = backend_sampling
    return _write_diff(path, before, _dump(y, data), "the recommended settings are printed above")


def _write_diff(path: Path, before: str, after: str, fallback: str) -> str:
    """Replace ``path`` with ``after`` unless it is ``before``; the unified diff."""
    if after == before:
        return ""
    try:
        _replace(path, after)
    except OSError as err:  # a full or read-only disk, no rights: the person gets the file and a fix
        raise UserError(
            f"{path}: cannot write it: {err.strerror or err}",
            hint=f"free space or fix its rights, or make the change yourself ({fallback})",
        ) from None
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), str(path), str(path)))


def _replace(path: Path, text: str) -> None:
    """Atomically replace ``path`` with ``text`` (temp file + rename), keeping its mode."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
