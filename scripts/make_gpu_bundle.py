#!/usr/bin/env python3
"""Make the bundle the GPU check carries to a machine without network (``bundle/`` by default).

It holds, in well under 64 MiB with this repository:
  * ``llama.cpp-<source key>.tar.xz``: the pinned, patched llama.cpp source, trimmed (no docs,
    test models, other ggml backends; ``orchestrator.native.bundle``), made from the cached
    sha256-checked sdist (``orchestrator build`` fetches it);
  * ``wheels/``: the Python packages a bare box lacks (fastapi, uvicorn, pydantic, gguf, ruamel.yaml
    and their own missing dependencies) for CPython ``--python-version`` on x86-64 Linux, at the
    versions installed here, fetched with ``pip download``;
  * ``MANIFEST.json``: every file's size and sha256.
``scripts/gpu_check.sh`` uses it when it finds it (``GPU_BUNDLE=DIR`` to point elsewhere).

Usage: scripts/make_gpu_bundle.py [--out bundle] [--python-version 3.12] [--no-wheels]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.errors import UserError  # noqa: E402
from orchestrator.native import bundle, fetch  # noqa: E402

# The package's own runtime dependencies (pyproject.toml, as installed here) and theirs, except
# llama-cpp-python (the GPU check does not load it in-process) and what a bare box has: Python 3.12
# with numpy, httpx, psutil, typer, rich, jinja2, uvloop, prometheus-client, nvidia-ml-py, matplotlib.
NOT_NEEDED = {"llama-cpp-python"}
ON_THE_BOX = {
    "numpy",
    "httpx",
    "httpcore",
    "certifi",
    "idna",
    "psutil",
    "typer",
    "shellingham",
    "rich",
    "markdown-it-py",
    "mdurl",
    "pygments",
    "jinja2",
    "markupsafe",
    "uvloop",
    "prometheus-client",
    "nvidia-ml-py",
    "matplotlib",
}
LIMIT_BYTES = 56 * 1024**2  # leaves room for the repository itself within 64 MiB


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def closure(roots: tuple[str, ...]) -> dict[str, str]:
    """``{name: version}`` of ``roots`` and their installed dependencies, minus ``ON_THE_BOX``."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: dict[str, str] = {}
    stack = list(roots)
    while stack:
        name = canonicalize_name(stack.pop())
        if name in found or name in ON_THE_BOX:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional dependency not installed here
        found[name] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                stack.append(req.name)
    return found


def roots() -> tuple[str, ...]:
    """The orchestrator distribution's runtime requirements (no extras) minus ``NOT_NEEDED``."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    names = []
    for line in metadata.requires("orchestrator") or []:
        req = Requirement(line)
        if (req.marker is None or req.marker.evaluate({"extra": ""})) and canonicalize_name(req.name) not in NOT_NEEDED:
            names.append(req.name)
    return tuple(names)


def wheels(out: Path, python_version: str) -> None:
    reqs = [f"{name}=={version}" for name, version in sorted(closure(roots()).items())]
    abi = "cp" + python_version.replace(".", "")
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        "--abi",
        abi,
        "--abi",
        "none",
        "--platform",
        "manylinux_2_17_x86_64",
        "--platform",
        "manylinux2014_x86_64",
        "--platform",
        "manylinux_2_28_x86_64",
        "--platform",
        "any",
        "-d",
        str(out / "wheels"),
        *reqs,
    ]
    subprocess.run(argv, check=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=REPO / "bundle")
    p.add_argument("--python-version", default="3.12", help="the target machine's Python (wheels)")
    p.add_argument("--no-wheels", action="store_true", help="only the source bundle")
    args = p.parse_args(argv)
    try:
        pin, patches = fetch.load_pin(), fetch.list_patches()
        source = fetch.prepare_source(pin, patches)
        target = args.out / bundle.bundle_name(fetch.source_key(pin, patches))
        for old in args.out.glob("llama.cpp-*.tar.xz"):
            old.unlink()
        bundle.make_source_bundle(source, pin, patches, target)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not args.no_wheels:
        wheels(args.out, args.python_version)
    files = sorted(f for f in args.out.rglob("*") if f.is_file() and f.name != "MANIFEST.json")
    total = sum(f.stat().st_size for f in files)
    manifest = {
        "files": {str(f.relative_to(args.out)): {"bytes": f.stat().st_size, "sha256": _sha256(f)} for f in files},
        "total_bytes": total,
        "python_version": args.python_version,
        "pin": pin.as_dict(),
    }
    (args.out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"{args.out}: {len(files)} files, {total / 2**20:.1f} MiB (source {target.stat().st_size / 2**20:.1f} MiB)")
    if total > LIMIT_BYTES:
        print(f"error: over {LIMIT_BYTES / 2**20:.0f} MiB", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
