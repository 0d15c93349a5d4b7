"""``scripts/install.sh``: the main job's install asks apt for no browser; ``--test`` adds
Debian's chromium (when missing) and the test extras.

The script runs for real up to its apt step, in a copy of the repository's scripts folder, with
a PATH whose ``apt-get`` records what it was asked for and whose ``ccache`` is missing (so apt
is always called); a Python that is "too old" then stops it before any venv or pip work.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _run_install(tmp_path: Path, *args: str) -> tuple[int, list[str]]:
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "install.sh", tmp_path / "scripts" / "install.sh")
    stubs = tmp_path / "bin"
    stubs.mkdir()
    record = tmp_path / "apt.log"
    for tool in ("cmake", "ninja", "g++", "git", "id", "dirname", "env"):
        real = shutil.which(tool)
        if real:
            (stubs / tool).symlink_to(real)
    (stubs / "apt-get").write_text(f'#!/bin/sh\necho "$@" >> {record}\n')
    (stubs / "apt-get").chmod(0o755)
    # python3 (for the venv check) is the real one; PYTHON is "too old", so the script stops there
    (stubs / "python3").symlink_to(shutil.which("python3") or "/usr/bin/python3")
    (stubs / "old-python").write_text("#!/bin/sh\nexit 1\n")
    (stubs / "old-python").chmod(0o755)
    env = {"PATH": str(stubs), "PYTHON": str(stubs / "old-python"), "HOME": str(tmp_path)}
    bash = shutil.which("bash") or "/bin/bash"
    done = subprocess.run(
        [bash, str(tmp_path / "scripts" / "install.sh"), *args], env=env, capture_output=True, text=True, timeout=60
    )
    asked = record.read_text().splitlines() if record.exists() else []
    return done.returncode, [line for line in asked if "install" in line]


def test_main_install_asks_for_no_browser(tmp_path: Path) -> None:
    rc, installs = _run_install(tmp_path)
    assert rc == 1  # stopped at the Python version check, after apt
    assert len(installs) == 1 and "ccache" in installs[0]
    assert "chromium" not in installs[0]


@pytest.mark.skipif(os.path.exists("/usr/bin/chromium"), reason="chromium is installed here: --test asks for none")
def test_test_install_asks_for_chromium(tmp_path: Path) -> None:
    rc, installs = _run_install(tmp_path, "--test")
    assert rc == 1
    assert "chromium" in installs[0]


def test_unknown_option_is_refused(tmp_path: Path) -> None:
    rc, installs = _run_install(tmp_path, "--browser")
    assert rc == 2 and installs == []
