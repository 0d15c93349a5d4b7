"""What the console reads from disk: instance log tails and the last ``orchestrator bench`` report.

Both are read only when the page asks (a console open and polling), never on the request path.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

# llama-server at -lv 4 (launch/argv.py) logs some 250 lines while the tiny model loads, more for a real one:
# the first window reaches back to the launch marker of the current process
TAIL_BYTES = 256 * 1024  # the first call of a log follower starts this far from the end
MAX_READ = 256 * 1024  # one follow call returns at most this many bytes
FIRST_LINES = 1000  # lines kept from the first call's window (as many as the page keeps)


def read_log(path: Path, offset: int | None) -> dict[str, Any]:
    """New complete lines of a log file, for a follower that remembers ``offset``.

    Args:
        path: the instance's log file (``<state>/logs/<instance>.log``).
        offset: bytes already read (from the previous answer), or None for the last
            :data:`FIRST_LINES` lines. An offset beyond the end (the file was replaced) starts
            over from the tail.

    Returns:
        ``{"offset": next offset (bytes), "lines": [str], "size": file size (bytes)}``. A line still
        being written (no newline yet) is left for the next call.
    """
    try:
        size = path.stat().st_size
    except OSError:
        return {"offset": 0, "lines": [], "size": 0}
    first = offset is None or offset > size
    start = max(0, size - TAIL_BYTES) if first else int(offset or 0)
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(min(MAX_READ, size - start))
    end = data.rfind(b"\n") + 1  # keep a partial last line for later
    chunk = data[:end]
    lines = chunk.decode("utf-8", errors="replace").splitlines()
    if first and start > 0 and lines:
        lines = lines[1:]  # the window began mid-line
    if first:
        lines = lines[-FIRST_LINES:]
    return {"offset": start + end, "lines": lines, "size": size}


_SUMMARY_FIELDS = (
    "k",
    "domain",
    "requests",
    "tps_median",
    "ttft_median",
    "acceptance",
    "tokens_per_step",
    "speedup",
)


def find_bench(folders: list[Path]) -> Path | None:
    """The newest ``results.json`` among ``folders`` (each a bench results folder), or None."""
    found = [f / "results.json" for f in folders if (f / "results.json").is_file()]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def bench_summary(path: Path) -> dict[str, Any]:
    """The parts of a bench ``results.json`` the console shows.

    Returns:
        ``{"found": True, "folder", "model", "finished_at", "recommended_k", "analysis" [str],
        "warnings" [str], "rows" [per (K, domain): k, domain, requests, tps_median (tok/s),
        ttft_median (s), acceptance, tokens_per_step, speedup], "has_plot"}``, or
        ``{"found": False, "error": why}`` when the file cannot be read.
    """
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        return {"found": False, "error": f"{path}: {err}"}
    if not isinstance(doc, dict):
        return {"found": False, "error": f"{path}: not a bench report"}
    rows = []
    for row in doc.get("summary") or []:
        if isinstance(row, dict):
            rows.append({k: _finite(row.get(k)) for k in _SUMMARY_FIELDS})
    return {
        "found": True,
        "folder": str(path.parent),
        "model": doc.get("model"),
        "finished_at": doc.get("finished_at"),
        "recommended_k": doc.get("recommended_k"),
        "analysis": [str(x) for x in doc.get("analysis") or []],
        "warnings": [str(x) for x in doc.get("warnings") or []],
        "rows": rows,
        "has_plot": (path.parent / "sweep.png").is_file(),
    }


def _finite(x: Any) -> Any:
    """JSON has no NaN: a missing baseline's speedup becomes None."""
    return None if isinstance(x, float) and not math.isfinite(x) else x
