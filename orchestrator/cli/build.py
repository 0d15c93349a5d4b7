"""``orchestrator build``: fetch, patch and compile llama-server, or say the cached build is current."""

from __future__ import annotations

import json
import os
import shutil
import time

from rich.console import Console

from orchestrator.native import fetch as native_fetch
from orchestrator.native import make as native_make
from orchestrator.native.build import (
    SPACE_NEEDED,
    TARGET,
    builds_root,
    ensure_source_copy,
    install,
    is_built,
    locate,
    set_current,
)
from orchestrator.native.plan import plan_build


def run(*, backend: str, cuda_arch: str | None, jobs: int | None, force: bool, show: bool) -> int:
    """``orchestrator build``: build (or confirm up to date) and print where the build is.

    Returns 0 on success or when up to date, 1 when CMake or the compile failed (the log path
    and its last lines are printed). Raises ``UserError`` for missing tools, download,
    checksum, patch or disk-space problems.
    """
    console = Console(stderr=True, soft_wrap=True)
    if show:
        info = locate()
        print(json.dumps(info.manifest or {"bin_dir": str(info.bin_dir), "manifest": None}, indent=2))
        return 0
    plan = plan_build(backend, cuda_arch)
    root = builds_root() / plan.key
    if not force and is_built(root, plan.key):
        set_current(root / "bin")
        console.print(f"llama-server is up to date ({plan.backend}, key {plan.key}): {root / 'bin'}")
        return 0
    native_fetch.require_space(builds_root(), SPACE_NEEDED[plan.backend], f"a {plan.backend} build")
    started = time.monotonic()
    if force:  # a clean build of this key (ccache still makes it quick); bin/ stays until replaced
        for stale in (root / "build", root / native_fetch.SOURCE_DIR_NAME):
            shutil.rmtree(stale, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    if not (root / native_fetch.SOURCE_DIR_NAME).is_dir():
        with console.status("preparing the patched llama.cpp source"):
            ensure_source_copy(root, plan)
    log = root / "build.log"
    ok = native_make.configure_and_compile(root, plan.cmake_flags(), TARGET, jobs or os.cpu_count() or 2, log, console)
    if not ok:
        return 1
    bin_dir = install(root, plan, time.monotonic() - started)
    set_current(bin_dir)
    manifest = json.loads((bin_dir / "manifest.json").read_text())
    console.print(f"built llama-server in {manifest['build_seconds']:.0f} s: {bin_dir}")
    console.print(f"  {manifest['version'].splitlines()[0] if manifest['version'] else '(no --version output)'}")
    return 0
