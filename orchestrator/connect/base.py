"""What every client's settings are made of: the lines ``connect`` prints, the files ``--write``
edits, and the figures derived from a model's window (the longest answer, the compaction point)."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.connect import limits
from orchestrator.connect.endpoint import Model

PROVIDER = "orchestrator"
# printed in place of the key: one shell word, so a pasted `export X=...` line runs (and fails to
# authenticate visibly) instead of being a syntax error
HIDDEN = "hidden-key--show-key-prints-it"


@dataclass(frozen=True)
class FileEdit:
    """One config file of a client and how ``--write`` changes it (only our keys; the rest stays)."""

    path: Path
    apply: Callable[[Path], None]


@dataclass(frozen=True)
class ClientConfig:
    """What ``connect`` prints (``lines``) and writes (``edits``; none: the client has no file)."""

    client: str
    lines: list[str]
    edits: tuple[FileEdit, ...] = field(default=())


def home(var: str, default: str) -> Path:
    """``$var`` when set, else ``~/default``."""
    return Path(os.environ.get(var) or Path.home() / default).expanduser()


def export(name: str, value: str) -> str:
    """An ``export`` line that pastes into a POSIX shell as is (the value quoted when it must be)."""
    return f"  export {name}={shlex.quote(value)}"


def json_lines(data: object) -> list[str]:
    """``data`` as indented JSON lines, to print."""
    return ["  " + line for line in json.dumps(data, indent=2).splitlines()]


def out_tokens(m: Model) -> int:
    """The longest answer a client asks for (``limits.out_tokens``: ``--max-output``, else a quarter
    of the window, at most 32,000)."""
    return limits.out_tokens(m.context, m.max_output)


def compact_at(m: Model) -> int:
    """Prompt tokens at which an agent should compact its history (``limits.compact_at``)."""
    return limits.compact_at(m.context, m.max_output)
