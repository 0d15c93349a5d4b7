"""A model's prompt-cache persistence state (``ModelKv``: on or off, why, since when, counters) and
the KV folder checks behind it: why a slot file could not be written, and whether a folder that
failed takes writes again.

Persistence is turned off for good by a restore that does not verify. A KV folder that cannot be
written (read-only, full, not ours) turns it off only until a later try finds it writable: at
most every ``RETRY_S`` (``ModelKv.retry_due``), a small write must work there and, after a fault
of no room, the disk must have more free space than at the fault (``still_unwritable``), else
the try would be a save that fills the disk again.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: s at least between two tries of a KV folder that could not be written: a try that fails costs a
#: save that writes until the disk is full again (and blocks its server meanwhile)
RETRY_S = 30.0
NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


@dataclass
class ModelKv:
    """Persistence state and counters of one model (for ``status`` and metrics)."""

    enabled: bool
    warning: str | None = None
    turned_off_at: float | None = None  # time.time() persistence was last turned off
    resumed_at: float | None = None  # time.time() it last came back on (the KV folder took writes again)
    saved: int = 0  # slot files written
    superseded: int = 0  # saved states dropped: their conversation has a longer one on disk
    busy_skipped: int = 0  # slots still generating at a save (not waited for)
    restored: int = 0  # slot files restored and verified
    checkpoints: int = 0  # context checkpoints restored with them
    crash_restores: int = 0  # replicas restored after a crash restart
    warmed: int = 0  # warm prefixes prefilled
    skipped: int = 0  # files refused: corrupt, truncated, unreadable
    outdated: int = 0  # files removed: saved by a llama.cpp of another slot state version (an older pin)
    verify_failures: int = 0
    restore_seconds: float = 0.0  # total, of verified restores
    last_restore_s: float | None = None
    warm_seconds: float = 0.0  # total prefill time of warm prefixes
    # off because the KV folder could not be written (tried again), not for good
    _disk_off: bool = field(default=False, repr=False)
    _tried_at: float = field(default=0.0, repr=False)  # time.monotonic() of the fault or the last try
    _free_at_fault: int = field(default=-1, repr=False)  # free bytes at a no-room fault (-1: another fault)

    def row(self) -> dict[str, Any]:
        """JSON-serialisable: the ``kv`` block of the model's ``status`` row."""
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def turn_off(self) -> None:
        """Persistence off for the rest of the run (until ``disk_fault`` makes it a disk's)."""
        self.enabled, self._disk_off, self.turned_off_at = False, False, time.time()

    def disk_fault(self, folder: Path, err: OSError) -> None:
        """Persistence off because ``folder`` could not be written (``err``): tried again later."""
        self.turn_off()
        self._disk_off, self._tried_at = True, time.monotonic()
        self._free_at_fault = free_bytes(folder) if err.errno in NO_ROOM else -1

    def retry_due(self) -> bool:
        """Whether a try of the KV folder is due now (off for the disk's sake, the last try at least
        ``RETRY_S`` ago); if so, it counts as made."""
        if not self._disk_off or time.monotonic() - self._tried_at < RETRY_S:
            return False
        self._tried_at = time.monotonic()
        return True

    @property
    def free_at_fault(self) -> int:
        """Free bytes of the KV folder's disk at a no-room fault, -1 after another fault."""
        return self._free_at_fault

    def resume(self) -> None:
        """Persistence back on: the KV folder takes writes again."""
        self.enabled, self._disk_off, self.warning, self.resumed_at = True, False, None, time.time()


def write_problem(folder: Path) -> OSError:
    """Why llama-server could not write a slot file into ``folder``: the error of a small write
    there, else (a small file fits, a slot file did not) no space."""
    return small_write_problem(folder) or OSError(errno.ENOSPC, "no room for a slot file", str(folder))


def still_unwritable(folder: Path, free_at_fault: int) -> OSError | None:
    """Why ``folder`` still cannot take a slot file (a small write fails, or no more free space than
    ``free_at_fault`` bytes, when that is not -1); None when it can. Blocking."""
    problem = small_write_problem(folder)
    free = free_bytes(folder)
    if problem is None and 0 <= free <= free_at_fault:
        problem = OSError(errno.ENOSPC, f"still no room: {free} bytes free", str(folder))
    return problem


def small_write_problem(folder: Path) -> OSError | None:
    """The error of a small write into ``folder`` (made if missing), None when it works."""
    probe = folder / ".kv-write-probe"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        probe.write_bytes(b"\0" * 4096)
        probe.unlink()
    except OSError as err:
        with contextlib.suppress(OSError):
            probe.unlink()
        return err
    return None


def free_bytes(folder: Path) -> int:
    """Free bytes of the disk holding ``folder`` (or its nearest existing parent); -1 when unknown."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return -1
