"""``orchestrator build --source DIR|TARBALL``: a user's llama.cpp tree, built with our patch queue.

The steps (``native.source_tree`` has the why of each): open the tree (a tarball is extracted
into the cache); refuse it before compiling when the runtime's bindings cannot read its
``llama.h``; copy it into a build folder of its own key and try every patch (applied / already
upstream / conflict); compile as ``orchestrator build`` does; prove the runtime reads the new
libllama; record the per-patch outcomes and the features that are off in ``manifest.json``; make
it the current build. A refused tree never becomes the current build.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from orchestrator.cli.build_progress import RichBuildProgress
from orchestrator.errors import UserError
from orchestrator.native import fetch as native_fetch
from orchestrator.native import make as native_make
from orchestrator.native import source_tree as st
from orchestrator.native.build import TARGETS, build_lock, builds_root, install, pinned_source, set_current
from orchestrator.native.features import features_off
from orchestrator.native.pin import Patch
from orchestrator.native.plan import BuildPlan, plan_build

REFUSED_HINT = (
    "the in-process runtime reads vocabularies through llama-cpp-python, whose bindings are made for the pin's "
    "llama.h: build the pin (`orchestrator build`), or a tree whose llama.h matches it"
)


def run_source(
    source: Path, *, backend: str, cuda_arch: str | None, jobs: int | None, force: bool, console: Console
) -> int:
    """Build ``source`` with the patch queue; 0 on success, 1 when CMake or the compile failed.

    Raises:
        UserError: no llama.cpp tree there, or one whose libllama the runtime cannot read (the
            reason is in the message), and everything ``orchestrator build`` raises.
    """
    tree = st.open_tree(source)
    reference = pinned_source()
    if problem := st.header_problem(tree.root, reference):
        raise UserError(f"{source}: refused: the runtime cannot read its libllama: {problem}", hint=REFUSED_HINT)
    queue = native_fetch.list_patches()
    plan = _plan(tree, queue, backend, cuda_arch)
    root = builds_root() / plan.key
    with build_lock(plan.key, lambda: console.print(f"another build of {plan.key} is running; waiting")):
        manifest = _read_manifest(root)
        if force or manifest.get("key") != plan.key or manifest.get("runtime") != "ok":
            built = _build(tree, plan, queue, root, jobs, console)
            if built is None:
                return 1
            manifest = built
        else:
            console.print(f"{source} is built already (key {plan.key}): {root / 'bin'}")
    _report(console, manifest)
    if manifest.get("runtime") != "ok":
        raise UserError(f"{source}: refused: {manifest.get('runtime')}", hint=REFUSED_HINT)
    set_current(root / "bin")
    console.print(f"current build: {root / 'bin'}")
    return 0


def _plan(tree: st.UserTree, queue: list[Patch], backend: str, cuda_arch: str | None) -> BuildPlan:
    """``orchestrator build``'s plan with the tree in place of the pin: its own key, its version stamp."""
    plan = plan_build(backend, cuda_arch)
    defines = {**plan.defines, "LLAMA_BUILD_COMMIT": tree.commit[:9], "LLAMA_BUILD_NUMBER": str(tree.build)}
    return dataclasses.replace(plan, pin=tree.pin(), patches=queue, defines=defines)


def _build(
    tree: st.UserTree, plan: BuildPlan, queue: list[Patch], root: Path, jobs: int | None, console: Console
) -> dict[str, Any] | None:
    """Copy, patch, compile and install; the manifest, or None when CMake or the compile failed."""

    started = time.monotonic()
    src = root / native_fetch.SOURCE_DIR_NAME
    shutil.rmtree(src, ignore_errors=True)  # a fresh copy: an earlier run's patches would read "already upstream"
    root.mkdir(parents=True, exist_ok=True)
    console.print(f"copying {tree.root} and applying native/patches")
    st.copy_tree(tree.root, src)
    outcomes = st.apply_queue(src, queue)
    present = {o.name for o in outcomes if o.status != st.CONFLICT}
    plan = dataclasses.replace(plan, patches=[p for p in queue if p.name in present])
    with RichBuildProgress(console) as progress:
        ok = native_make.configure_and_compile(
            root, plan.cmake_flags(), TARGETS, jobs or os.cpu_count() or 2, root / "build.log", progress
        )
    if not ok:
        return None
    bin_dir = install(root, plan, time.monotonic() - started)
    vocab = _vocab(src)
    expect = [9707, 1879] if vocab.name == "ggml-vocab-qwen35.gguf" else None  # its "Hello world"
    problem = st.runtime_problem(bin_dir, vocab, expect, plan.runtime_lib_dirs)
    manifest: dict[str, Any] = json.loads((bin_dir / "manifest.json").read_text())
    manifest.update(
        source={"path": str(tree.origin), "kind": tree.kind, "digest": tree.digest},
        upstream_commit=tree.commit,
        upstream_build=f"b{tree.build}" if tree.build else None,
        patch_outcomes=[dataclasses.asdict(o) for o in outcomes],
        features_off=[f.line() for f in features_off([p.name for p in queue], frozenset(present))],
        runtime="ok" if problem is None else f"the runtime cannot read its libllama: {problem}",
    )
    (bin_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _vocab(src: Path) -> Path:
    """A vocabulary GGUF the tree ships (Qwen3.5's, whose "Hello world" ids are known, when there)."""
    qwen = src / "models" / "ggml-vocab-qwen35.gguf"
    found = qwen if qwen.is_file() else next(iter(sorted((src / "models").glob("ggml-vocab-*.gguf"))), None)
    if found is None:
        raise UserError(f"{src}/models holds no ggml-vocab-*.gguf to check the runtime with")
    return found


def _read_manifest(root: Path) -> dict[str, Any]:
    try:
        data = json.loads((root / "bin" / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _report(console: Console, manifest: dict[str, Any]) -> None:
    """One line per patch, then the features that are off (as adopting a llama-server reports them)."""
    console.print(f"llama.cpp from {manifest.get('source', {}).get('path')}: patches", highlight=False)
    for o in manifest.get("patch_outcomes") or []:
        o = st.PatchOutcome(o["name"], o["status"], tuple(o.get("files") or ()))
        console.print(f"  {o.line()}", markup=False, highlight=False)
    for line in manifest.get("features_off") or []:
        console.print(f"  feature off: {line}", markup=False, highlight=False, soft_wrap=True)
    if not manifest.get("features_off"):
        console.print("  every feature of the patch queue is on", highlight=False)
