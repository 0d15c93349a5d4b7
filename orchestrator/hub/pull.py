"""Download a source's files into the shared hub cache: resumable across runs, with a progress
bar, each LFS file checked against the hub's sha256 before it becomes a blob.

``huggingface_hub`` resumes a transfer that drops within one call (it retries with a ``Range``
request), but drops its partial file when the call ends, so an interrupted 20 GB download would
start over. Here each blob is downloaded by ``huggingface_hub``'s own ``http_get`` into a stable
``blobs/<sha256>.partial`` file, resumed from its length on the next run, checked against the
sha256 the hub lists, and renamed to ``blobs/<sha256>``; ``hf_hub_download`` then finds the blob
and writes the snapshot link and the branch ref exactly as for any other tool.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from httpx2 import HTTPError  # huggingface_hub's HTTP client: its errors' base class
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import http_get
from huggingface_hub.utils._headers import build_hf_headers
from tqdm import tqdm

from orchestrator.config.model_paths import HfSource
from orchestrator.errors import UserError
from orchestrator.hub.cache import Pulled, cache_dir, endpoint, pull_command, repo_dir
from orchestrator.hub.select import RepoFile, Selection, select, select_projector

#: told one line per file: ("downloading", name) / ("cached", name) / ("verified", name)
OnFile = Callable[[str, str], None]


class Bar(tqdm):  # type: ignore[misc]
    """huggingface_hub's download bar, shown also when stderr is no terminal (``up``'s log, CI),
    where tqdm would hide it; there it redraws every 5 s. ``HF_HUB_DISABLE_PROGRESS_BARS=1`` hides it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["disable"] = os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS", "").lower() in ("1", "true", "yes")
        if not sys.stderr.isatty():
            kwargs.update(mininterval=5.0, ascii=True)
        super().__init__(*args, **kwargs)


# the hub's HTTP errors (its HTTP client's base class) and the file system's
_ERRORS = (HTTPError, OSError)


def list_files(source: HfSource) -> tuple[str, list[RepoFile]]:
    """(commit, files with sizes and the hub's sha256) of ``source``'s repository at its revision.

    Raises:
        UserError: no such repository or revision, a gated one, or the hub cannot be reached.
    """
    where = f"{source.repo} on {endpoint()}"
    try:
        info = HfApi(endpoint=endpoint()).model_info(source.repo, revision=source.revision, files_metadata=True)
    except GatedRepoError:
        raise UserError(f"{where} is gated", hint="accept its terms on the hub and `hf auth login`") from None
    except RepositoryNotFoundError:
        raise UserError(f"no repository {where}", hint="check the OWNER/NAME spelling on the hub") from None
    except RevisionNotFoundError:
        raise UserError(f"{where} has no revision {source.revision!r}", hint="use a branch, tag or commit") from None
    except _ERRORS as err:
        raise UserError(f"cannot list {where}: {err}", hint="check the network (or HF_ENDPOINT), then retry") from None
    files = [RepoFile(s.rfilename, s.size, s.lfs.sha256 if s.lfs is not None else None) for s in info.siblings or []]
    return str(info.sha), files


def pull(source: HfSource, on_file: OnFile | None = None, *, projector: bool = False) -> Pulled:
    """Fetch ``source``'s model files and MTP head into the hub cache (what is there is kept);
    ``projector``: the source names a vision projector (``select.select_projector``).

    Raises:
        UserError: see ``list_files`` and ``select``; a file whose bytes do not match the hub's
            sha256 (the partial file is removed: the next run downloads it again); a transfer
            that fails (the partial file is kept: the next run resumes it).
    """
    commit, files = list_files(source)
    chosen: Selection = (select_projector if projector else select)(files, source.selector, source.repo)
    tell = on_file or (lambda _what, _name: None)
    paths = [_fetch(source, commit, f, tell) for f in chosen.files]
    head = paths[len(chosen.model)] if chosen.head else None
    return Pulled(model=paths[0], head=head, files=paths)


def _fetch(source: HfSource, commit: str, f: RepoFile, tell: OnFile) -> Path:
    """One file: the blob by resumable download (LFS files), then ``hf_hub_download`` links it."""
    revision = source.revision or "main"
    try:
        meta = get_hf_file_metadata(hf_hub_url(source.repo, f.name, revision=commit, endpoint=endpoint()))
        blob = repo_dir(source.repo) / "blobs" / str(meta.etag)
        if f.sha256 and not blob.is_file():
            tell("downloading", f.name)
            _download_blob(meta.location, blob, meta.size, f, source)
            tell("verified", f.name)
        elif blob.is_file():
            tell("cached", f.name)
        return Path(hf_hub_download(source.repo, f.name, revision=revision, cache_dir=cache_dir(), endpoint=endpoint()))
    except EntryNotFoundError:
        raise UserError(f"{source.repo} has no file {f.name!r}", hint=pull_command(source)) from None
    except _ERRORS as err:
        raise UserError(
            f"downloading {f.name} from {source.repo} failed: {err}",
            hint=f"run `{pull_command(source)}` again: it resumes where this stopped",
        ) from None


def _download_blob(url: str, blob: Path, size: int | None, f: RepoFile, source: HfSource) -> None:
    """Download into ``<blob>.partial`` from its current length, check the sha256, rename."""
    blob.parent.mkdir(parents=True, exist_ok=True)
    partial = blob.with_name(blob.name + ".partial")
    with (blob.parent / (blob.name + ".lock")).open("a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another `pull` of the same file waits, then finds the blob
        if blob.is_file():
            return
        done = partial.stat().st_size if partial.exists() else 0
        if size is not None and done > size:
            partial.unlink()
            done = 0
        # unbuffered: every byte received is on disk, so a killed run resumes from all of them
        with partial.open("ab", buffering=0) as out:
            http_get(
                url,
                out,
                resume_size=done,
                headers=build_hf_headers(),
                expected_size=size,
                displayed_filename=f.name,
                tqdm_class=Bar,
            )
        actual = _sha256(partial)
        if actual != f.sha256:
            partial.unlink()
            raise UserError(
                f"{f.name} from {source.repo} is corrupt: sha256 {actual}, the hub lists {f.sha256}; "
                "the download was removed",
                hint=f"run `{pull_command(source)}` again; if it repeats, the hub's copy or a proxy is at fault",
            )
        os.replace(partial, blob)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
