"""Formatting shared by the commands that show instances (``up``'s live table, ``status``)."""

from __future__ import annotations

# rich styles of the instance states (``ProcessState`` values)
STATE_STYLES = {"ready": "green", "degraded": "yellow", "loading": "cyan", "restarting": "yellow", "failed": "red"}


def duration(seconds: float | None) -> str:
    """An uptime for a table: ``"-"`` for None, ``"4m05s"`` under an hour, ``"2h03m"`` from one hour."""
    if seconds is None:
        return "-"
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"
