"""Run CMake + Ninja for the native build; everything goes to a log file.

Ninja prints ``[n/N] <step>`` per build step; those lines go to a ``BuildProgress`` (the
command line draws a bar from them). On failure the progress gets the log's path and its last
lines, so the cause is visible without opening it.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO, Protocol

from orchestrator.native import fetch as native_fetch


class BuildProgress(Protocol):
    """What a build reports while it runs."""

    def phase(self, name: str) -> None:
        """A new phase starts: ``"configure (cmake)"`` or ``"compile"``."""

    def step(self, done: int, total: int, what: str) -> None:
        """Ninja finished step ``done`` of ``total``; ``what`` is its description."""

    def failed(self, what: str, log: Path, tail: list[str]) -> None:
        """``what`` failed; ``tail`` holds the last lines of ``log``."""


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


def configure_and_compile(
    root: Path, flags: list[str], targets: list[str], jobs: int, log: Path, progress: BuildProgress
) -> bool:
    """Configure ``root/llama.cpp`` into ``root/build`` (Ninja) and build ``targets``.

    Args:
        flags: ``-DNAME=VALUE`` CMake arguments.
        jobs: parallel compile jobs.
        log: file receiving the full output of both steps (overwritten).
        progress: told of phases, Ninja steps and a failure.
    Returns True on success; on failure reports the log's last lines to ``progress`` and returns False.
    """
    env = build_env(root)
    configure = ["cmake", "-S", native_fetch.SOURCE_DIR_NAME, "-B", "build", "-G", "Ninja", *flags]
    compile_ = ["cmake", "--build", "build", "--target", *targets, "-j", str(jobs)]
    with log.open("w") as fh:
        progress.phase("configure (cmake)")
        fh.write("$ " + " ".join(configure) + "\n")
        if _run(configure, root, env, fh, lambda line: None) != 0:
            return _failed("CMake configure", log, progress)

        def on_line(line: str) -> None:
            step = parse_step(line)
            if step:
                progress.step(*step)

        progress.phase("compile")
        fh.write("$ " + " ".join(compile_) + "\n")
        if _run(compile_, root, env, fh, on_line) != 0:
            return _failed(f"compiling {', '.join(targets)}", log, progress)
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


def _failed(what: str, log: Path, progress: BuildProgress) -> bool:
    progress.failed(what, log, log.read_text(errors="replace").splitlines()[-TAIL_LINES:])
    return False
