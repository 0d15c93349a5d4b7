"""A trimmed, compressed copy of the pinned llama.cpp source, for machines without network.

The pinned sdist is 77 MB; a rented GPU box that may carry 64 MiB in all needs less. The
bundle keeps what ``cmake -DGGML_CUDA=ON`` (or CPU) needs to build ``llama-server`` and what
the model generators read (the Qwen tokenizer and chat template), and drops documentation,
test models, media, benchmarks and the other ggml backends. It is the *patched* tree (the
source ``fetch.prepare_source`` makes), so the target machine needs no git to apply
``native/patches``; its ``BUNDLE.json`` names the pin and patches, and ``fetch.prepare_source``
takes it only when they are the current ones (same source key, so the same build key).

``make_source_bundle(source, pin, patches, out)`` writes ``llama.cpp-<source key>.tar.xz`` (xz,
level 9, members sorted, BUNDLE.json first); ``find_bundle`` returns ``$ORCHESTRATOR_SOURCE_BUNDLE``
or ``<cache>/downloads/llama.cpp-<source key>.tar.xz``; ``extract_bundle`` checks and extracts
it. ``scripts/make_gpu_bundle.py`` makes one.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

from orchestrator import paths
from orchestrator.errors import UserError
from orchestrator.native.pin import Patch, Pin

ENV_BUNDLE = "ORCHESTRATOR_SOURCE_BUNDLE"
MANIFEST = "BUNDLE.json"
# Paths (relative to the llama.cpp root) left out: nothing in a llama-server build reads them
# (not ggml-rpc: every build has GGML_RPC on, ``native.plan.PRESETS``).
EXCLUDE = (
    "docs/",
    "media/",
    ".github/",
    ".devops/",
    "benches/",
    "tests/",
    "examples/",
    "gguf-py/",
    "conversion/",
    "tools/ui/tests/",
    "models/",
    *(
        f"ggml/src/ggml-{b}/"
        for b in (
            "cann",
            "openvino",
            "webgpu",
            "et",
            "metal",
            "hexagon",
            "sycl",
            "vulkan",
            "opencl",
            "virtgpu",
            "musa",
            "hip",
            "zdnn",
            "blas",
            "kompute",
        )
    ),
)
# ...except the files the tiny and shaped model generators read
KEEP = ("models/ggml-vocab-qwen35.gguf", "models/templates/Qwen3.5-4B.jinja")


def bundle_name(key: str) -> str:
    """The bundle's file name for a source key (``fetch.source_key``)."""
    return f"llama.cpp-{key}.tar.xz"


def _identity(pin: Pin, patches: list[Patch]) -> dict[str, object]:
    return {"pin": pin.as_dict(), "patches": [[p.name, p.sha256] for p in patches]}


def _kept(rel: str) -> bool:
    return rel in KEEP or not any(rel == p.rstrip("/") or rel.startswith(p) for p in EXCLUDE)


def make_source_bundle(source: Path, pin: Pin, patches: list[Patch], out: Path) -> Path:
    """Write the trimmed bundle of the patched ``source`` tree (``fetch.prepare_source(pin,
    patches)``) to ``out`` (atomically). Returns ``out``."""
    files = sorted(p for p in source.rglob("*") if p.is_file() and not p.is_symlink())
    kept = [p for p in files if _kept(p.relative_to(source).as_posix())]
    info = {**_identity(pin, patches), "excluded": list(EXCLUDE), "kept": list(KEEP), "files": len(kept)}
    tmp = out.with_name(out.name + ".part")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tmp, "w:xz", preset=9) as dst:
        raw = json.dumps(info, indent=2).encode()
        head = tarfile.TarInfo(MANIFEST)
        head.size = len(raw)
        dst.addfile(head, io.BytesIO(raw))
        for path in kept:
            m = dst.gettarinfo(str(path), arcname=f"llama.cpp/{path.relative_to(source).as_posix()}")
            m.uid = m.gid = 0
            m.uname = m.gname = ""
            with path.open("rb") as fh:
                dst.addfile(m, fh)
    tmp.replace(out)
    return out


def find_bundle(key: str) -> Path | None:
    """``$ORCHESTRATOR_SOURCE_BUNDLE`` (must exist) or the cached bundle for ``pin``, or None."""
    env = os.environ.get(ENV_BUNDLE)
    if env:
        path = Path(env).expanduser()
        if not path.is_file():
            raise UserError(f"{ENV_BUNDLE}={env} is not a file", hint="point it at llama.cpp-<commit>.tar.xz")
        return path
    cached = paths.cache_root() / "downloads" / bundle_name(key)
    return cached if cached.is_file() else None


def extract_bundle(bundle: Path, pin: Pin, patches: list[Patch], dest: Path) -> None:
    """Extract ``bundle``'s ``llama.cpp/`` into ``dest`` (which must not exist) after checking it
    was made from ``pin`` and ``patches``. Raises ``UserError`` for another source or a broken file."""
    try:
        with tarfile.open(bundle, "r:xz") as tar:
            first = tar.next()
            if first is None or first.name != MANIFEST:
                raise UserError(f"{bundle} is not a source bundle (no {MANIFEST} first)")
            info = json.loads(tar.extractfile(first).read())  # type: ignore[union-attr]
            if {k: info.get(k) for k in ("pin", "patches")} != _identity(pin, patches):
                raise UserError(
                    f"{bundle} was made from another pin or patch queue than native/",
                    hint="make a new one with scripts/make_gpu_bundle.py",
                )
            members = []
            for m in tar:
                if m.name.startswith("llama.cpp/"):
                    m.name = m.name[len("llama.cpp/") :]
                    if m.name:
                        members.append(m)
            _extract(tar, dest, members)
    except (tarfile.TarError, OSError, ValueError) as err:
        raise UserError(f"{bundle}: cannot read the source bundle ({err})", hint="copy it again") from None


def _extract(tar: tarfile.TarFile, dest: Path, members: list[tarfile.TarInfo]) -> None:
    """Extract regular files and folders only, inside ``dest`` (tarfile's ``data`` filter where
    this Python has it: 3.11.4+ and 3.12+)."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, members=members, filter="data")
        return
    for m in members:
        if m.name.startswith("/") or ".." in Path(m.name).parts or not (m.isfile() or m.isdir()):
            raise UserError(f"unsafe member {m.name!r} in the source bundle")
    tar.extractall(dest, members=members)
