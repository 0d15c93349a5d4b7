"""The Hugging Face hub cache, as ``huggingface_hub`` lays it out and every tool shares it::

    <HF_HUB_CACHE>/models--OWNER--NAME/blobs/<etag>             the bytes (sha256 name for LFS files)
    <HF_HUB_CACHE>/models--OWNER--NAME/snapshots/<commit>/<path>  links to blobs
    <HF_HUB_CACHE>/models--OWNER--NAME/refs/<branch>              the commit a branch was at

The environment is read at each call (not at import, as ``huggingface_hub.constants`` does), so
``HF_ENDPOINT``/``HF_HUB_CACHE``/``HF_HOME`` set later still count.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config.model_paths import HfSource
from orchestrator.errors import UserError
from orchestrator.hub.select import RepoFile, select, select_projector

DEFAULT_ENDPOINT = "https://huggingface.co"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class Pulled:
    """A source's files in the cache: the model (part 1 of a split model) and its MTP head."""

    model: Path
    head: Path | None
    files: list[Path]


def endpoint() -> str:
    """The hub to talk to: ``$HF_ENDPOINT`` or huggingface.co."""
    return os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")


def cache_dir() -> Path:
    """``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub`` (as huggingface_hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def repo_dir(repo: str) -> Path:
    """``<cache>/models--OWNER--NAME``."""
    return cache_dir() / ("models--" + repo.replace("/", "--"))


def pull_command(source: HfSource, *, projector: bool = False) -> str:
    return f"orchestrator pull {source.spec}" + (" --mmproj" if projector else "")


def cached(source: HfSource, *, projector: bool = False) -> Pulled | None:
    """``source``'s files if the cache holds all of them (no network), else None; ``projector``:
    the source names a vision projector (models.yaml ``mmproj``, ``select.select_projector``)."""
    storage = repo_dir(source.repo)
    revision = source.revision or "main"
    if _COMMIT.match(revision):
        commit = revision
    else:
        try:
            commit = (storage / "refs" / revision).read_text().strip()
        except OSError:
            return None
    snapshot = storage / "snapshots" / commit
    if not snapshot.is_dir():
        return None
    files = [RepoFile(p.relative_to(snapshot).as_posix()) for p in snapshot.rglob("*") if p.is_file()]
    try:
        chosen = (select_projector if projector else select)(files, source.selector, source.repo)
    except UserError:
        return None
    paths = [snapshot / f.name for f in chosen.files]
    if not all(p.is_file() for p in paths):
        return None
    return Pulled(model=paths[0], head=snapshot / chosen.head.name if chosen.head else None, files=paths)


def require_cached(source: HfSource, *, projector: bool = False) -> Pulled:
    """``cached(source)``, or a ``UserError`` naming the pull command to run."""
    found = cached(source, projector=projector)
    if found is None:
        raise UserError(
            f"hf:{source.spec} is not downloaded yet (hub cache {cache_dir()})",
            # reached from --dry-run, bench and --offline alike: only a plain `up` pulls by itself
            hint=f"run `{pull_command(source, projector=projector)}` first (`orchestrator up` pulls it, not with "
            "--dry-run or --offline)",
        )
    return found
