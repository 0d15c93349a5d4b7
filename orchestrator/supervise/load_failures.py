"""Consecutive load failures: a child that keeps dying before it is ready ends in FAILED.

The crash-loop rule (``crash_loop_count`` crashes within ``crash_loop_window`` seconds) counts
crashes by time, so a load that fails slowly slips through it: a 23 GB model that reads its
weights for 20 s and then runs out of GPU memory crashes once every ~25 s and is relaunched
forever. This counter ignores time: every launch that exits (or stalls) before it was ever
ready counts, and being ready once clears the count. ``SupervisorPolicy.load_failure_limit``
failures in a row end in FAILED, whatever their timing.
"""

from __future__ import annotations


class LoadFailures:
    """Launches in a row that ended before the child became ready.

    Args:
        limit: failures in a row that end in FAILED (``SupervisorPolicy.load_failure_limit``).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0

    def failed(self) -> bool:
        """Account one launch that ended before ready; True when the limit is reached."""
        self.count += 1
        return self.count >= self.limit

    def ready(self) -> None:
        """The child became ready: the next failure starts a new run of failures."""
        self.count = 0

    def describe(self) -> str:
        """``"failed to load 3 times in a row (never ready)"`` for the FAILED message."""
        return f"failed to load {self.count} times in a row (never ready)"
