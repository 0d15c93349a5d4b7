"""A user's own llama.cpp tree (``orchestrator build --source DIR|TARBALL``) with our patch queue.

Users who follow upstream (their master, a release tarball) want our patches on their tree. Each
patch of the queue is tried on a copy of it, in order, and gets one outcome:

- ``applied``: it applied;
- ``already upstream``: its reverse applies, so the tree has it already (upstream merged it, or
  the user applied it);
- ``conflict``: neither; the files git could not patch are named, and the features that patch adds
  are off in the build (``features.features_off``), exactly as for an adopted llama-server.

The in-process runtime reads vocabularies through llama-cpp-python's ctypes bindings, written for
the pin's ``include/llama.h``. A tree whose ``llama.h`` lays out a struct the bindings read
differently, or changes or drops a function they call, would be read wrongly or not at all:
``header_problem`` compares the two before anything is compiled, and ``runtime_problem`` proves it
after the build by loading a vocabulary through the bindings against the new library.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator import paths
from orchestrator.errors import UserError
from orchestrator.native import fetch as native_fetch
from orchestrator.native.build import loader_path
from orchestrator.native.pin import Patch, Pin

APPLIED, UPSTREAM, CONFLICT = "applied", "already upstream", "conflict"
_FAILED_FILE = re.compile(r"error: (?:patch failed: ([^:\s]+):\d+|([^:\s]+): (?:patch does not apply|No such file))")
_STRUCT = re.compile(r"\bstruct\s+(llama_\w+)\s*\{(.*?)\n\s*\}\s*\w*\s*;", re.DOTALL)  # typedef'd too
_FUNCTION = re.compile(r"LLAMA_API\s+([^;{]*?\b(llama_\w+)\s*\([^;{]*\))\s*;", re.DOTALL)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
# top-level folders of a checkout that are not source: a copy skips them
_NOT_SOURCE = (".git", "build", "node_modules", ".cache")


@dataclass(frozen=True)
class PatchOutcome:
    """What one patch of the queue did to the tree: ``status`` and, for a conflict, the files."""

    name: str
    status: str
    files: tuple[str, ...] = ()

    def line(self) -> str:
        where = f" ({', '.join(self.files)})" if self.files else ""
        return f"{self.name}: {self.status}{where}"


@dataclass
class UserTree:
    """A user's tree, unpacked: ``root`` holds CMakeLists.txt; ``digest`` names its content."""

    origin: Path
    kind: str  # "directory" or "tarball"
    root: Path
    digest: str
    commit: str = "unknown"
    build: int = 0
    outcomes: list[PatchOutcome] = field(default_factory=list)

    def pin(self) -> Pin:
        """The tree as a ``Pin`` (what the build key and manifest record)."""
        return Pin(
            package="source",
            version=self.digest[:16],
            sha256=self.digest,
            subdir=str(self.origin),
            repo=f"{self.kind} {self.origin}",
            commit=self.commit,
            build=self.build,
        )


def find_root(folder: Path) -> Path | None:
    """The llama.cpp root at or just below ``folder`` (an sdist holds it in ``llama.cpp/``)."""
    candidates = [folder, folder / "llama.cpp", *sorted(p for p in folder.iterdir() if p.is_dir())]
    for c in candidates:
        if (c / "CMakeLists.txt").is_file() and (c / "include" / "llama.h").is_file() and (c / "tools/server").is_dir():
            return c
    return None


def open_tree(path: Path) -> UserTree:
    """A directory or tarball of llama.cpp as a ``UserTree`` (a tarball is extracted into the cache).

    Raises:
        UserError: the path is missing, not a tarball, or holds no llama.cpp tree.
    """
    path = path.expanduser().resolve()
    if path.is_dir():
        root = find_root(path)
        if root is None:
            raise UserError(f"{path}: no llama.cpp tree (CMakeLists.txt, include/llama.h, tools/server)")
        commit, build = _git_version(root)
        return UserTree(path, "directory", root, _dir_digest(root), commit, build)
    if not path.is_file():
        raise UserError(f"--source {path}: no such directory or file")
    if not tarfile.is_tarfile(path):
        raise UserError(f"--source {path}: not a directory or a tar archive", hint="give a llama.cpp folder or .tar.gz")
    digest = native_fetch.sha256_file(path)
    dest = paths.cache_root() / "sources" / f"user-{digest[:16]}"
    if not dest.is_dir():
        tmp = dest.with_name(dest.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        with tarfile.open(path, "r:*") as tar:
            tar.extractall(tmp, filter="data")
        tmp.rename(dest)
    root = find_root(dest) or next((find_root(p) for p in dest.iterdir() if p.is_dir() and find_root(p)), None)
    if root is None:
        raise UserError(f"{path}: the archive holds no llama.cpp tree (CMakeLists.txt, include/llama.h)")
    return UserTree(path, "tarball", root, digest)


def _dir_digest(root: Path) -> str:
    """A cheap identity of a checkout: every source file's path, size and modification time."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == root:
            dirnames[:] = [d for d in dirnames if not d.startswith(_NOT_SOURCE)]
        dirnames.sort()
        for name in sorted(filenames):
            st = (Path(dirpath) / name).lstat()
            h.update(f"{os.path.relpath(dirpath, root)}/{name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _git_version(root: Path) -> tuple[str, int]:
    """(short commit, build number) of a git checkout, as llama.cpp's CMake reads them; else unknown."""
    if not (root / ".git").exists():
        return "unknown", 0
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(root.parent)}

    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=root, env=env, capture_output=True, text=True, check=False)
        return out.stdout.strip() if out.returncode == 0 else ""

    count = git("rev-list", "--count", "HEAD")
    return git("rev-parse", "--short", "HEAD") or "unknown", int(count) if count.isdigit() else 0


def copy_tree(root: Path, dest: Path) -> None:
    """Copy the tree's source (not its .git or build folders) to ``dest``, which must not exist."""
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(root, tmp, symlinks=True, ignore=_top_level_ignore(root))
    tmp.rename(dest)


def _top_level_ignore(root: Path) -> Callable[[str, list[str]], list[str]]:
    """shutil.copytree's ``ignore``: the top level's .git and build folders."""

    def ignore(folder: str, names: list[str]) -> list[str]:
        if Path(folder) != root:
            return []
        return [n for n in names if n.startswith(_NOT_SOURCE) and (root / n).is_dir()]

    return ignore


def apply_queue(src: Path, patches: list[Patch]) -> list[PatchOutcome]:
    """Try every patch on ``src`` in order (see the module); never raises for a patch that does not fit."""
    outcomes = []
    for patch in patches:
        if native_fetch.git_apply(src, patch.path, "--reverse", "--check").returncode == 0:
            outcomes.append(PatchOutcome(patch.name, UPSTREAM))
            continue
        result = native_fetch.git_apply(src, patch.path)
        if result.returncode == 0:
            outcomes.append(PatchOutcome(patch.name, APPLIED))
            continue
        files = tuple(dict.fromkeys(a or b for a, b in _FAILED_FILE.findall(result.stderr)))
        outcomes.append(PatchOutcome(patch.name, CONFLICT, files or ("see git's message",)))
    return outcomes


def _squash(text: str) -> str:
    return " ".join(text.split())


def _api(header: str) -> tuple[dict[str, str], dict[str, str]]:
    """(struct name -> body, function name -> declaration) of ``llama.h``, comments and spacing dropped."""
    text = _COMMENT.sub("", header)
    structs = {name: _squash(body) for name, body in _STRUCT.findall(text)}
    functions = {name: _squash(decl) for decl, name in _FUNCTION.findall(text)}
    return structs, functions


def header_problem(tree: Path, reference: Path) -> str | None:
    """Why llama-cpp-python's bindings (made for ``reference``'s ``include/llama.h``) cannot read
    ``tree``'s libllama, or None: a struct laid out differently, a function changed or gone."""
    ref_structs, ref_functions = _api((reference / "include/llama.h").read_text(errors="replace"))
    structs, functions = _api((tree / "include/llama.h").read_text(errors="replace"))
    changed = [f"struct {n}" for n in ref_structs if structs.get(n) != ref_structs[n]]
    changed += [f"{n}()" for n in ref_functions if functions.get(n) != ref_functions[n]]
    if not changed:
        return None
    shown = ", ".join(changed[:6]) + (f" and {len(changed) - 6} more" if len(changed) > 6 else "")
    return f"its include/llama.h differs from the pin's in {shown}"


_PROBE = """
import json, sys
import llama_cpp
llm = llama_cpp.Llama(model_path=sys.argv[1], vocab_only=True, verbose=False)
print(json.dumps({"n_vocab": llm.n_vocab(), "tokens": llm.tokenize(b"Hello world", add_bos=False, special=False)}))
"""


def runtime_problem(
    lib_dir: Path, vocab: Path, expect: list[int] | None, runtime_lib_dirs: list[str] | None = None
) -> str | None:
    """Load ``vocab`` through llama-cpp-python bound to ``lib_dir``'s libllama in a fresh process and
    tokenize "Hello world"; None when that works (and gives ``expect``), else why not.
    ``runtime_lib_dirs``: a CUDA build's runtime folders, for the loader."""
    env = {**os.environ, "LLAMA_CPP_LIB_PATH": str(lib_dir), **loader_path([str(lib_dir), *(runtime_lib_dirs or [])])}
    try:
        out = subprocess.run(
            [sys.executable, "-c", _PROBE, str(vocab)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "loading a vocabulary through llama-cpp-python did not finish in 120 s"
    if out.returncode != 0:
        tail = " / ".join(out.stderr.strip().splitlines()[-2:]) or f"exit {out.returncode}"
        return f"llama-cpp-python could not load a vocabulary through it: {tail}"
    said = json.loads(out.stdout.strip().splitlines()[-1])
    if said["n_vocab"] <= 0 or (expect is not None and said["tokens"] != expect):
        return f"llama-cpp-python read it wrongly: n_vocab {said['n_vocab']}, 'Hello world' -> {said['tokens']}"
    return None
