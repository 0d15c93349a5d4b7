"""The native build: the pinned llama.cpp plus ``native/patches``, compiled once per build key.

``orchestrator build`` (``orchestrator.cli.build``) runs: fetch, verify, extract and patch the
source (``native.fetch``); configure with CMake + Ninja (flags: ``native.plan``); build the ``llama-server`` target (it
yields ``libllama.so``, ``libggml*.so`` and ``libmtmd.so`` too); copy the server and its
libraries into ``bin/`` with ``manifest.json``; point ``builds/current.json`` at it. One
build serves both llama-server and the in-process Python runtime (``orchestrator.models.runtime``).

Layout under ``paths.cache_root()/builds``::

    <key>/llama.cpp   patched source (a copy, so each key is self-contained)
    <key>/build       CMake build tree
    <key>/bin         llama-server, lib*.so*, manifest.json (RUNPATH $ORIGIN: movable)
    <key>/build.log   full configure + compile log
    <key>.lock        flock held while one ``orchestrator build`` works on ``<key>``
    current.json      {"key", "bin_dir"} of the last successful build; what locate() reads

``llama.cpp`` and ``build`` sit side by side under one root and ccache runs with
``CCACHE_BASEDIR=<key>``, so compile commands hash relative paths and a rebuild under a new
key (a patch edit) is mostly cache hits.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator import paths
from orchestrator.errors import UserError
from orchestrator.native import fetch as native_fetch
from orchestrator.native.plan import BuildPlan

ENV_BIN_DIR = "ORCHESTRATOR_BIN_DIR"
ENV_SOURCE_DIR = "ORCHESTRATOR_SOURCE_DIR"
SERVER = "llama-server"
TARGET = "llama-server"
# The RPC worker (llama.cpp ``tools/rpc``: target and binary ``ggml-rpc-server``), run by ``orchestrator worker``.
RPC_SERVER = "ggml-rpc-server"
TARGETS = [TARGET, RPC_SERVER]
# ``RPC_PROTO_*_VERSION`` in the pinned source: a worker must speak exactly this protocol.
RPC_HEADER = "ggml/include/ggml-rpc.h"
NO_BUILD_HINT = "run `orchestrator build` (or set ORCHESTRATOR_BIN_DIR to a folder holding llama-server)"

# Free space needed before extracting + building (bytes): source copy ~180 MB, build tree
# ~30 MB (CPU) or a few GB of CUDA objects.
SPACE_NEEDED = {"cpu": 1 * 1024**3, "cuda": 6 * 1024**3}


@dataclass(frozen=True)
class BuildInfo:
    """A usable native build: ``server`` is llama-server, ``lib_dir`` holds libllama.so and
    libggml*.so (for ``LLAMA_CPP_LIB_PATH``), ``manifest`` is ``manifest.json`` ({} if absent)."""

    bin_dir: Path
    server: Path
    lib_dir: Path
    manifest: dict[str, Any]


def builds_root() -> Path:
    """Where builds live: ``<cache>/builds``, one folder per build key."""
    return paths.cache_root() / "builds"


def locate() -> BuildInfo:
    """Find the native build: ``$ORCHESTRATOR_BIN_DIR`` when set, else the last successful
    ``orchestrator build`` (``builds/current.json``).

    Raises ``UserError`` ("no native build; run `orchestrator build`") when there is none or
    its llama-server is missing.
    """
    env = os.environ.get(ENV_BIN_DIR)
    if env:
        bin_dir = Path(env).expanduser()
    else:
        pointer = builds_root() / "current.json"
        try:
            bin_dir = Path(json.loads(pointer.read_text())["bin_dir"])
        except (OSError, ValueError, KeyError):
            raise UserError("no native build; run `orchestrator build`", hint=NO_BUILD_HINT) from None
    server = bin_dir / SERVER
    if not (server.is_file() and os.access(server, os.X_OK)):
        raise UserError(f"no native build; run `orchestrator build` ({server} is missing)", hint=NO_BUILD_HINT)
    manifest_path = bin_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    return BuildInfo(bin_dir=bin_dir, server=server, lib_dir=bin_dir, manifest=manifest)


def adopt(server: Path) -> BuildInfo:
    """A llama-server the user already has (``build.llama_server`` or ``up --llama-server``) as a
    ``BuildInfo``: its folder is its library folder (release archives and CMake builds put the
    ``lib*.so`` files beside it, or find them through RUNPATH). Its manifest says ``adopted`` and
    lists no patches, so the features of our patch queue are reported off
    (``capabilities.probe_capabilities``).

    Raises:
        UserError: the path is not an executable file.
    """
    path = server.expanduser()
    if path.is_dir():
        path = path / SERVER
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise UserError(
            f"{path}: not an executable llama-server",
            hint="point build.llama_server (or up --llama-server) at the llama-server binary of your llama.cpp",
        )
    return BuildInfo(bin_dir=path.parent, server=path, lib_dir=path.parent, manifest={"adopted": True, "patches": []})


def pinned_source() -> Path:
    """Root of the pinned llama.cpp source with ``native/patches`` applied (downloaded and
    extracted on demand into the cache; nothing is compiled). ``$ORCHESTRATOR_SOURCE_DIR``
    overrides it. Raises ``UserError`` on download, checksum or patch failures."""
    env = os.environ.get(ENV_SOURCE_DIR)
    if env:
        src = Path(env).expanduser()
        if not (src / "CMakeLists.txt").is_file():
            raise UserError(f"{ENV_SOURCE_DIR}={env} is not a llama.cpp source tree")
        return src
    return native_fetch.prepare_source(native_fetch.load_pin(), native_fetch.list_patches())


@contextlib.contextmanager
def build_lock(key: str, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive ``fcntl.flock`` on ``builds/<key>.lock`` for the body.

    Several ``orchestrator build`` runs (from several checkouts, sharing one cache) of the same
    key would otherwise extract, configure and compile into the same folder at once. The second
    run waits here until the first is done; it then finds the build finished (callers re-check
    ``is_built`` inside the lock). ``on_wait`` is called once, before blocking, when another
    process holds the lock. The kernel drops the lock when the holder dies, so a killed build
    never leaves the cache locked.
    """
    builds_root().mkdir(parents=True, exist_ok=True)
    with (builds_root() / f"{key}.lock").open("a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def is_built(root: Path, key: str, programs: tuple[str, ...] = (SERVER, RPC_SERVER)) -> bool:
    """Whether ``root/bin`` holds a finished build of ``key`` with ``programs``."""
    try:
        manifest = json.loads((root / "bin" / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return manifest.get("key") == key and all((root / "bin" / name).is_file() for name in programs)


def ensure_source_copy(root: Path, plan: BuildPlan, on_bytes: native_fetch.OnBytes | None = None) -> None:
    """Copy the patched source into ``<root>/llama.cpp`` once (the build tree sits beside it)."""
    dest = root / native_fetch.SOURCE_DIR_NAME
    if dest.is_dir():
        return
    src = native_fetch.prepare_source(plan.pin, plan.patches, on_bytes)
    tmp = root / ".source.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp, symlinks=True)
    tmp.rename(dest)


def install(root: Path, plan: BuildPlan, seconds: float) -> Path:
    """Copy llama-server, ggml-rpc-server and every ``lib*.so*`` from ``build/bin`` into
    ``<root>/bin`` and write ``manifest.json`` there (``rpc_server``: the worker binary's name,
    ``rpc_protocol``: the RPC protocol version of the pinned source). Returns the bin folder."""
    built = root / "build" / "bin"
    staging = root / "bin.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    programs = [built / name for name in (SERVER, RPC_SERVER) if (built / name).exists()]  # --no-patches: no worker
    for item in [*programs, *sorted(built.glob("lib*.so*"))]:
        shutil.copy2(item, staging / item.name, follow_symlinks=False)
    manifest = {
        "key": plan.key,
        "pin": plan.pin.as_dict(),
        "upstream_commit": plan.pin.commit,
        # upstream's number for that commit (release b<N>): llama-server itself prints build 0
        "upstream_build": f"b{plan.pin.build}" if plan.pin.build else None,
        "patches": [{"name": p.name, "sha256": p.sha256} for p in plan.patches],
        "backend": plan.backend,
        "cuda_arch": plan.cuda_arch,
        "compiler": plan.compiler,
        "nvcc": plan.nvcc,
        "cmake_flags": plan.cmake_flags(),
        "build_seconds": round(seconds, 1),
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "llama_server_sha256": native_fetch.sha256_file(staging / SERVER),
        "runtime_lib_dirs": plan.runtime_lib_dirs,
        "version": server_version(staging / SERVER, plan.runtime_lib_dirs),
        "rpc_server": RPC_SERVER if (staging / RPC_SERVER).exists() else None,
        "rpc_protocol": rpc_protocol_version(root / native_fetch.SOURCE_DIR_NAME),
    }
    (staging / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    shutil.rmtree(root / "bin", ignore_errors=True)
    staging.rename(root / "bin")
    return root / "bin"


def server_version(server: Path, runtime_lib_dirs: list[str] | None = None) -> str:
    """``llama-server --version`` output (it prints on stderr), e.g.
    ``version: 0.5.0-dev (build 0, commit 0c1e570)``; lines about loading backends are dropped.

    Runs the binary as its children will run it: its own folder and ``runtime_lib_dirs`` on
    the loader's path.

    Raises:
        UserError: the binary does not start (e.g. exit 127: a CUDA library the loader cannot
            find), so a build that cannot run is never recorded as a success.
    """
    env = {**os.environ, **loader_path([str(server.parent), *(runtime_lib_dirs or [])])}
    result = subprocess.run(
        [str(server), "--version"], capture_output=True, text=True, timeout=60, check=False, env=env
    )
    if result.returncode != 0:
        message, hint = start_failure(server, result.returncode, result.stdout + result.stderr)
        raise UserError(f"the built {message}", hint=hint)
    lines = (result.stdout + result.stderr).splitlines()
    keep = [line for line in lines if line.startswith(("version:", "built with"))]
    return "\n".join(keep or lines).strip()


# The CUDA runtime libraries a CUDA build links, in the order they depend on each other.
RUNTIME_LIBRARIES = ("libcudart.so", "libcublasLt.so", "libcublas.so")


def preload_runtime_libraries(build: BuildInfo) -> list[str]:
    """Load the CUDA runtime libraries of ``build``'s recorded ``runtime_lib_dirs`` into this
    process (``RTLD_GLOBAL``), so that libllama loaded in-process (``models.runtime``) finds them
    by soname: ``LD_LIBRARY_PATH`` set after the process started does not reach the loader.

    Returns the paths loaded. Raises ``OSError`` when a library there does not load.
    """
    loaded: list[str] = []
    for folder in (build.manifest or {}).get("runtime_lib_dirs") or []:
        for stem in RUNTIME_LIBRARIES:
            found = sorted(Path(folder).glob(stem + ".*"), key=lambda p: len(p.name))
            if found:
                ctypes.CDLL(str(found[0]), mode=ctypes.RTLD_GLOBAL)
                loaded.append(str(found[0]))
    return loaded


def loader_path(folders: list[str]) -> dict[str, str]:
    """``LD_LIBRARY_PATH`` with ``folders`` first, then the current value."""
    current = os.environ.get("LD_LIBRARY_PATH")
    return {"LD_LIBRARY_PATH": ":".join([*folders, *([current] if current else [])])}


_MISSING_LIB = re.compile(r"error while loading shared libraries: ([^:\s]+)")


def start_failure(server: Path, returncode: int, output: str) -> tuple[str, str]:
    """(message, hint) for a llama-server that exited ``returncode`` at start with ``output``.

    Exit 127 with the dynamic loader's ``error while loading shared libraries: LIB`` is a
    runtime library missing from the loader's path: a rebuild cannot help, making LIB findable
    does. Anything else is a broken build: rebuild.
    """
    said = " / ".join(output.strip().splitlines()[-3:]) or "no output"
    missing = _MISSING_LIB.search(output)
    if returncode == 127 and missing:
        lib = missing.group(1)
        what = "cuBLAS" if "cublas" in lib else "the CUDA runtime" if "cuda" in lib else lib
        return (
            f"{server} does not start (exit 127): the loader cannot find {lib} ({said})",
            f"install {what} or add the folder holding {lib} to LD_LIBRARY_PATH (a rebuild does not help); "
            "CUDA from pip: pip install nvidia-cublas nvidia-cuda-runtime, then `orchestrator build`",
        )
    return f"{server} does not start (exit {returncode}): {said}", "rebuild with `orchestrator build --force`"


def rpc_protocol_version(source: Path) -> str | None:
    """``"major.minor.patch"`` of the RPC protocol in llama.cpp source ``source``
    (``RPC_PROTO_{MAJOR,MINOR,PATCH}_VERSION`` in ``ggml/include/ggml-rpc.h``), None if absent.

    ggml-rpc's client refuses a server of another major or a newer minor; the patch changes with
    the set of graph operations (``GGML_OP_COUNT``), so we require all three to match.
    """
    try:
        text = (source / RPC_HEADER).read_text()
    except OSError:
        return None
    found = dict(re.findall(r"#define\s+RPC_PROTO_(MAJOR|MINOR|PATCH)_VERSION\s+(\d+)", text))
    if len(found) != 3:
        return None
    return f"{found['MAJOR']}.{found['MINOR']}.{found['PATCH']}"


def set_current(bin_dir: Path) -> None:
    """Point ``builds/current.json`` (what ``locate`` reads) at ``bin_dir``, atomically."""
    pointer = builds_root() / "current.json"
    tmp = pointer.with_suffix(".tmp")
    tmp.write_text(json.dumps({"key": bin_dir.parent.name, "bin_dir": str(bin_dir)}) + "\n")
    tmp.replace(pointer)
