"""``orchestrator build``: fetch, patch and compile llama-server, or say the cached build is current."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
)

from orchestrator.cli.build_progress import RichBuildProgress
from orchestrator.config.load import load_config
from orchestrator.errors import UserError
from orchestrator.native import fetch as native_fetch
from orchestrator.native import make as native_make
from orchestrator.native import registry
from orchestrator.native.build import (
    RPC_SERVER,
    SERVER,
    SPACE_NEEDED,
    TARGET,
    TARGETS,
    build_lock,
    builds_root,
    ensure_source_copy,
    install,
    is_built,
    locate,
    set_current,
)
from orchestrator.native.plan import BuildPlan, plan_build


def build_options(config: Path | None, backend: str | None, cuda_arch: str | None) -> tuple[str, str | None]:
    """(backend, cuda_arch): the command line's, else the ``build:`` block of ``config``
    (models.yaml; ``None`` = ``./models.yaml`` when it exists), else ``auto`` and none.

    Raises:
        UserError: ``config`` was named but is missing, or does not validate (file:line: key).
    """
    path = config if config is not None else Path("models.yaml")
    if config is None and not path.is_file():
        return backend or "auto", cuda_arch
    block = load_config(path).build
    if backend is None and cuda_arch is None:
        return block.backend, block.cuda_arch
    return backend or block.backend, cuda_arch if cuda_arch is not None else block.cuda_arch


def run(
    *,
    backend: str | None,
    cuda_arch: str | None,
    jobs: int | None,
    force: bool,
    show: bool,
    config: Path | None = None,
    no_patches: bool = False,
    source: Path | None = None,
) -> int:
    """``orchestrator build``: build (or confirm up to date) and print where the build is.

    ``no_patches`` builds only llama-server from the pinned source without ``native/patches``
    (its own key; never the current build): a stock llama.cpp of the pinned commit, which the
    tests serve through as an adopted ``build.llama_server``.

    ``source`` (a llama.cpp folder or tarball) builds that tree with the patch queue instead of the
    pin (``orchestrator.cli.build_source``).

    ``backend``/``cuda_arch`` None take the ``build:`` block of ``config`` (see ``build_options``).
    Returns 0 on success or when up to date, 1 when CMake or the compile failed (the log path
    and its last lines are printed). Raises ``UserError`` for missing tools, download,
    checksum, patch or disk-space problems, and a built binary that does not start.
    """
    console = Console(stderr=True, soft_wrap=True)
    if show:
        info = locate()
        shown = info.manifest or {"bin_dir": str(info.bin_dir), "manifest": None}
        pin = native_fetch.load_pin()
        if shown.get("upstream_commit") == pin.commit and pin.build:
            shown = {**shown, "upstream_build": f"b{pin.build}"}  # builds made before it was recorded
        # how old the pin is: its build and date, and the registry's newest source (short timeout)
        shown = {**shown, "pin_age": registry.pin_age(pin)}
        print(json.dumps(shown, indent=2))
        return 0
    options = build_options(config, backend, cuda_arch)
    if source is not None:
        from orchestrator.cli.build_source import run_source

        if no_patches:
            raise UserError("--source builds a tree with the patch queue; drop --no-patches")
        return run_source(source, backend=options[0], cuda_arch=options[1], jobs=jobs, force=force, console=console)
    plan = plan_build(*options, patched=False) if no_patches else plan_build(*options)
    root = builds_root() / plan.key
    programs, targets = ((SERVER,), [TARGET]) if no_patches else ((SERVER, RPC_SERVER), TARGETS)
    what = "llama-server without our patches" if no_patches else "llama-server"
    if not force and is_built(root, plan.key, programs):
        if not no_patches:
            set_current(root / "bin")
        console.print(f"{what} is up to date ({plan.backend}, key {plan.key}): {root / 'bin'}")
        return 0
    with build_lock(plan.key, lambda: console.print(f"another `orchestrator build` is building {plan.key}; waiting")):
        if not force and is_built(root, plan.key, programs):  # built by the run we waited for
            if not no_patches:
                set_current(root / "bin")
            console.print(f"{what} was built meanwhile ({plan.backend}, key {plan.key}): {root / 'bin'}")
            return 0
        return _build(plan, root, force, jobs, console, targets)


def _build(plan: BuildPlan, root: Path, force: bool, jobs: int | None, console: Console, targets: list[str]) -> int:
    """Extract, configure, compile and install ``plan`` into ``root`` (the caller holds the lock)."""
    native_fetch.require_space(builds_root(), SPACE_NEEDED[plan.backend], f"a {plan.backend} build")
    started = time.monotonic()
    if force:  # a clean build of this key (ccache still makes it quick); bin/ stays until replaced
        for stale in (root / "build", root / native_fetch.SOURCE_DIR_NAME):
            shutil.rmtree(stale, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    if not (root / native_fetch.SOURCE_DIR_NAME).is_dir():
        with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), transient=True) as bar:
            task = bar.add_task("preparing the patched llama.cpp source", total=None)
            ensure_source_copy(root, plan, lambda done, total: bar.update(task, completed=done, total=total))
    log = root / "build.log"
    with RichBuildProgress(console) as progress:
        ok = native_make.configure_and_compile(
            root, plan.cmake_flags(), targets, jobs or os.cpu_count() or 2, log, progress
        )
    if not ok:
        return 1
    bin_dir = install(root, plan, time.monotonic() - started)
    if plan.patches or not native_fetch.list_patches():  # an unpatched build never becomes the current one
        set_current(bin_dir)
    manifest = json.loads((bin_dir / "manifest.json").read_text())
    console.print(f"built llama-server in {manifest['build_seconds']:.0f} s: {bin_dir}")
    console.print(f"  {built_line(manifest)}", markup=False, highlight=False)
    return 0


def built_line(manifest: dict[str, Any]) -> str:
    """``"llama.cpp b11312 (0c1e57098), 5 patches, cpu"``: what was built, as upstream names it.
    Not llama-server's ``--version`` alone: built from the PyPI sdist it says ``build 0``."""
    patches = manifest.get("patches") or []
    release = manifest.get("upstream_build") or "(unknown release)"
    commit = manifest.get("upstream_commit", "?")
    what = f"llama.cpp {release}{'' if commit == release else f' ({commit})'}, {len(patches)} patches, "
    return what + str(manifest.get("backend", "?"))
