"""Run CMake + Ninja for the native build with a progress bar; everything goes to a log file.

Ninja prints ``[n/N] <step>`` per build step; those lines drive the bar. On failure the
log's path and its last lines are printed so the cause is visible without opening it.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from orchestrator.native import fetch as native_fetch

STEP = re.compile(r"^\[(\d+)/(\d+)\]\s*(.*)$")
TAIL_LINES = 30


def build_env(root: Path) -> dict[str, str]:
    """Environment for CMake and the compilers under build root ``root``.

    ``CCACHE_BASEDIR`` makes ccache hash paths below ``root`` relatively, so the same source
    in another build root (another key) hits the cache. ``GIT_CEILING_DIRECTORIES`` keeps
    llama.cpp's CMake from reading the git state of a repository that happens to hold the cache.
    """
    return {
        **os.environ,
        "CCACHE_BASEDIR": str(root),
        "GIT_CEILING_DIRECTORIES": str(root),
        "NINJA_STATUS": "[%f/%t] ",
    }


def parse_step(line: str) -> tuple[int, int, str] | None:
    """``"[12/212] Building CXX object x.o"`` -> ``(12, 212, "Building CXX object x.o")``."""
    match = STEP.match(line)
    return (int(match.group(1)), int(match.group(2)), match.group(3)) if match else None


def configure_and_compile(root: Path, flags: list[str], target: str, jobs: int, log: Path, console: Console) -> bool:
    """Configure ``root/llama.cpp`` into ``root/build`` (Ninja) and build ``target``.

    Args:
        flags: ``-DNAME=VALUE`` CMake arguments.
        jobs: parallel compile jobs.
        log: file receiving the full output of both steps (overwritten).
    Returns True on success; on failure prints the log path and its last lines and returns False.
    """
    env = build_env(root)
    configure = ["cmake", "-S", native_fetch.SOURCE_DIR_NAME, "-B", "build", "-G", "Ninja", *flags]
    compile_ = ["cmake", "--build", "build", "--target", target, "-j", str(jobs)]
    with log.open("w") as fh, _progress(console) as bar:
        task = bar.add_task("configure (cmake)", total=None)
        fh.write("$ " + " ".join(configure) + "\n")
        if _run(configure, root, env, fh, lambda line: None) != 0:
            return _failed("CMake configure", log, console)

        plain_every = 0 if console.is_terminal else 10  # percent; CI logs get plain lines, not bars
        last_pct = [-plain_every]

        def on_line(line: str) -> None:
            step = parse_step(line)
            if step:
                done, total, what = step
                bar.update(task, completed=done, total=total, description=_short(what))
                pct = 100 * done // max(total, 1)
                if plain_every and (pct >= last_pct[0] + plain_every or done == total):
                    last_pct[0] = pct
                    console.print(f"compile [{done}/{total}] {pct}%", markup=False, highlight=False)

        bar.update(task, description="compile", completed=0, total=None)
        fh.write("$ " + " ".join(compile_) + "\n")
        if _run(compile_, root, env, fh, on_line) != 0:
            return _failed(f"compiling {target}", log, console)
    return True


def _run(argv: list[str], cwd: Path, env: dict[str, str], log: IO[str], on_line: Callable[[str], None]) -> int:
    with subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            on_line(line.rstrip("\n"))
        log.flush()  # a failure report reads the log right after
        return proc.wait()


def _progress(console: Console) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", style="cyan"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


def _short(step: str, width: int = 48) -> str:
    """The interesting tail of a Ninja step (``Building CXX object .../server-http.cpp.o``)."""
    what = step.rsplit("/", 1)[-1] if "/" in step else step
    return what[-width:]


def _failed(what: str, log: Path, console: Console) -> bool:
    lines = log.read_text(errors="replace").splitlines()[-TAIL_LINES:]
    console.print(f"[red]{what} failed[/red]; full log: {log}")
    console.print("\n".join(lines), markup=False, highlight=False)
    return False
