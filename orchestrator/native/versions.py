"""Upstream llama.cpp build numbers: what a llama-server's ``--version`` says, and the known-bad
windows of upstream builds. Pure functions on strings and numbers.

Upstream numbers every commit on master (``git rev-list --count``) and tags releases ``bNNNNN``;
users and bug reports name versions that way, not by commit. ``native/pin.toml`` records the
pin's number (``[upstream] build``); our own build passes ``LLAMA_BUILD_NUMBER=0`` (the sdist has
no git history), so for it the pin's number is the one to show.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# "version: 11312 (0c1e5709)" (older builds) or "version: X (build 11312, commit 0c1e570)" (newer)
_NEW = re.compile(r"\(build (\d+), commit ([0-9A-Za-z]+)\)")
_OLD = re.compile(r"version:\s*(\d+)\s*\(([0-9A-Za-z]+)\)")


@dataclass(frozen=True)
class ServerVersion:
    """What ``llama-server --version`` says: upstream build number (0 = unknown, e.g. a build
    from a tree without git history) and commit."""

    build: int
    commit: str

    @property
    def tag(self) -> str:
        """``b11312``, or ``unknown build`` for 0."""
        return f"b{self.build}" if self.build else "unknown build"


@dataclass(frozen=True)
class KnownBad:
    """An upstream window ``first``..``last`` (inclusive) where ``feature`` is broken."""

    first: int
    last: int
    feature: str
    what: str
    needs_mtp: bool

    def covers(self, build: int) -> bool:
        return self.first <= build <= self.last


KNOWN_BAD: tuple[KnownBad, ...] = (
    KnownBad(
        10741,
        10748,
        "draft-mtp",
        "b10741-b10748 break --spec-type draft-mtp on GGUFs with an MTP head",
        needs_mtp=True,
    ),
)


def parse_version(text: str) -> ServerVersion | None:
    """The build number and commit in ``llama-server --version`` output, None when absent."""
    found = _NEW.search(text) or _OLD.search(text)
    if found is None:
        return None
    return ServerVersion(build=int(found.group(1)), commit=found.group(2))


def known_bad(build: int, *, mtp: bool = True) -> list[KnownBad]:
    """The known-bad windows ``build`` falls in; those that need an MTP head only when ``mtp``."""
    return [bad for bad in KNOWN_BAD if bad.covers(build) and (mtp or not bad.needs_mtp)]


def describe_pin(commit: str, build: int, date: str = "") -> str:
    """``b11434 of 2026-10-06`` or ``b11312 (0c1e57098)``: the pin as users compare it with
    upstream (a commit that is only the tag again is not repeated)."""
    if not build:
        return commit
    said = f"b{build}" if commit in ("", f"b{build}") else f"b{build} ({commit})"
    return f"{said} of {date}" if date else said
