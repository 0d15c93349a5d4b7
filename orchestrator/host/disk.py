"""Writes that may fail for the disk's sake: a full, read-only or forbidden folder degrades, never stops serving.

Every file the orchestrator writes while it serves (``run.json``, the children's logs, the bench
and console files, saved prompt caches) goes through :func:`attempt`: a write that fails with
ENOSPC, EDQUOT, EFBIG, EACCES, EPERM, EROFS or EIO is recorded here instead of raised. The first
failure of each kind of file logs one warning (logger "orchestrator.disk"); later ones only count;
the first success afterwards logs that it recovered and clears it. ``status``, ``/health`` and
the console show :func:`faults` (what, where, the error, since when, how many). Any other
``OSError`` (a bug: a missing parent we should have made, a bad name) still raises.

:func:`folder_problem` is the ``doctor`` check: a folder that is not writable or nearly full.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
log = logging.getLogger("orchestrator.disk")

DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EPERM, errno.EROFS, errno.EIO})
# doctor: a folder with less free space than this is "nearly full"
NEARLY_FULL_BYTES = 1 << 30
NEARLY_FULL_FRACTION = 0.02


@dataclass
class Fault:
    """One kind of file that could not be written."""

    what: str
    path: str
    error: str
    since: float
    count: int = 1

    def as_dict(self) -> dict[str, object]:
        return {"what": self.what, "path": self.path, "error": self.error, "since": self.since, "count": self.count}


_faults: dict[str, Fault] = {}
_lock = threading.Lock()  # the bench and the console write from worker threads too


def is_disk_error(err: OSError) -> bool:
    """True for a fault of the disk or the folder's rights, not of the program."""
    return err.errno in DISK_ERRNOS


def failed(what: str, path: Path | str, err: OSError) -> None:
    """Record that writing ``what`` at ``path`` failed with ``err`` (warns on the first one)."""
    with _lock:
        fault = _faults.get(what)
        if fault is not None:
            fault.count += 1
            return
        _faults[what] = Fault(what, str(path), os.strerror(err.errno or 0) or str(err), time.time())
    log.warning("cannot write %s (%s): %s; serving goes on without it", what, path, os.strerror(err.errno or 0))


def succeeded(what: str) -> None:
    """Record a write of ``what`` that worked (clears its fault, logging the recovery)."""
    if what not in _faults:
        return
    with _lock:
        fault = _faults.pop(what, None)
    if fault is not None:
        log.warning("writing %s works again (%d writes failed)", what, fault.count)


def attempt(what: str, path: Path | str, write: Callable[[], T]) -> T | None:
    """Run ``write``; a disk fault is recorded (see module docstring) and gives None.

    Raises:
        OSError: any error that is not a disk fault.
    """
    try:
        result = write()
    except OSError as err:
        if not is_disk_error(err):
            raise
        failed(what, path, err)
        return None
    succeeded(what)
    return result


def make_folder(what: str, folder: Path, mode: int = 0o700) -> Path | None:
    """``folder`` made (with its parents; ``mode`` for the new ones), or None on a disk fault."""

    def make() -> Path:
        folder.mkdir(parents=True, exist_ok=True, mode=mode)
        return folder

    return attempt(what, folder, make)


def faults() -> list[dict[str, object]]:
    """The writes failing now, oldest first (``[]`` when every write works)."""
    with _lock:
        return [f.as_dict() for f in sorted(_faults.values(), key=lambda f: f.since)]


def failing(what: str) -> bool:
    """True while writes of ``what`` fail."""
    return what in _faults


def clear() -> None:
    """Forget every fault (tests)."""
    with _lock:
        _faults.clear()


def folder_problem(folder: Path) -> str | None:
    """Why ``folder`` (or its nearest existing parent) cannot take the orchestrator's files, else None.

    Not writable (read-only file system, no permission: checked by creating a file), or nearly
    full (under 1 GiB and under 2 % free).
    """
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        return f"{existing} is not writable: {os.strerror(err.errno or 0) or err}"
    usage = shutil.disk_usage(existing)
    if usage.free < NEARLY_FULL_BYTES and usage.free < usage.total * NEARLY_FULL_FRACTION:
        return f"{existing} is nearly full: {usage.free >> 20} MiB free of {usage.total >> 20} MiB"
    return None
