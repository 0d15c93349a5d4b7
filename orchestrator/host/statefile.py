"""``run.json``: what a running ``orchestrator up`` publishes for ``status``, ``logs`` and ``down``.

Lives in ``paths.state_dir()``; written atomically (temp file + rename) with mode 0600 because
it may hold an API key. Fields::

    {"pid": 1234, "pid_started": 1700000000.5,   # the orchestrator process and its start time
     "endpoint": "http://127.0.0.1:8080", "config": "/abs/models.yaml", "api_key": "..." | null,
     "started_at": 1700000000.0,
     "instances": {"demo-0": {"pid": 1240, "state": "ready", "log": "/.../logs/demo-0.log",
                              "base_url": "http://127.0.0.1:40123"}, ...}}

A record only counts as live when the pid exists *and* started when the record says (the pid
was not recycled by an unrelated process).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from orchestrator import paths
from orchestrator.errors import UserError
from orchestrator.host import disk

RUN_FILE = "run.json"


def run_file() -> Path:
    """Path of ``run.json``."""
    return paths.state_dir() / RUN_FILE


def log_dir() -> Path:
    """Directory of the per-instance llama-server logs (kept after exit for post-mortems)."""
    return paths.state_dir() / "logs"


def process_start_time(pid: int) -> float | None:
    """Start time of ``pid`` (Unix seconds) or None when it does not exist."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return float(proc.create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def write(data: dict[str, Any]) -> Path | None:
    """Atomically replace ``run.json`` with ``data`` (mode 0600). Returns its path.

    A full, read-only or forbidden state folder is recorded (``orchestrator.host.disk``) and
    gives None: the last run.json written (if any) stays, and serving goes on.
    """
    return disk.attempt("state file run.json", run_file(), lambda: _write(data))


def _write(data: dict[str, Any]) -> Path:
    target = run_file()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".run-", suffix=".json", dir=target.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


def read() -> dict[str, Any] | None:
    """The contents of ``run.json``, or None when absent or unreadable."""
    try:
        data = json.loads(run_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_live(data: dict[str, Any]) -> bool:
    """True when the orchestrator that wrote ``data`` is still running."""
    pid = data.get("pid")
    if not isinstance(pid, int):
        return False
    started = process_start_time(pid)
    if started is None:
        return False
    recorded = data.get("pid_started")
    return not isinstance(recorded, (int, float)) or abs(started - recorded) < 2.0


def read_live() -> dict[str, Any] | None:
    """``run.json`` of a running orchestrator, or None (absent, or its process is gone)."""
    data = read()
    return data if data is not None and is_live(data) else None


def claim() -> None:
    """Refuse to start when another orchestrator is running; clear a stale record.

    Raises:
        UserError: ``run.json`` names a live orchestrator process.
    """
    data = read()
    if data is None:
        return
    if is_live(data):
        raise UserError(
            f"an orchestrator is already running (pid {data.get('pid')}, endpoint {data.get('endpoint')})",
            hint="stop it with `orchestrator down`, or set ORCHESTRATOR_STATE to run a second one separately",
        )
    remove(None)


def remove(pid: int | None) -> None:
    """Delete ``run.json``; with ``pid`` only when the file belongs to that process."""
    if pid is not None:
        data = read()
        if data is not None and data.get("pid") != pid:
            return
    with contextlib.suppress(OSError):
        run_file().unlink()
