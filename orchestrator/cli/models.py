"""``orchestrator ps``, ``load``, ``unload`` and ``reload``: steer the models of a running ``orchestrator up``.

Like ``status``, they find it through ``run.json`` (endpoint and API key) and talk HTTP to it:
``GET /status`` (the ``models`` rows), ``POST /models/load``, ``POST /models/unload`` and
``POST /reload``. Exit status: 0 on success, 1 when no orchestrator runs or it refused (the
reason is printed), 2 for a usage mistake.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from orchestrator.cli.format import STATE_STYLES, duration
from orchestrator.host import statefile

NOT_RUNNING = "no orchestrator is running (start one with `orchestrator up`)"
MODEL_STYLES = {**STATE_STYLES, "unloaded": "dim", "unloading": "yellow"}


def _request(method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 5.0) -> tuple[int, Any]:
    """Send one request to the running orchestrator; ``(status, JSON body)``, or ``(0, message)``."""
    import httpx

    run = statefile.read_live()
    if run is None:
        return 0, NOT_RUNNING
    headers = {"Authorization": f"Bearer {run['api_key']}"} if run.get("api_key") else {}
    try:
        resp = httpx.request(
            method, f"{run['endpoint']}{path}", json=body, headers=headers, timeout=timeout, trust_env=False
        )
    except httpx.HTTPError as err:
        return 0, f"the orchestrator at {run['endpoint']} did not answer: {err}"
    try:
        return resp.status_code, resp.json()
    except ValueError:
        return resp.status_code, {"error": {"message": resp.text[:300]}}


def _fail(status: int, doc: Any) -> int:
    if status == 0:
        print(doc, file=sys.stderr)
    else:
        error = doc.get("error", {}) if isinstance(doc, dict) else {}
        print(f"error ({status}): {error.get('message', doc)}", file=sys.stderr)
    return 1


def ps(json_out: bool = False) -> int:
    """Print each model: state, device, memory estimate, idle time, time until unload, requests."""
    status, doc = _request("GET", "/status")
    if status != 200:
        return _fail(status, doc)
    if json_out:
        print(json.dumps({"models": doc.get("models", []), "memory": doc.get("memory", {})}, indent=2))
        return 0
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=200)
    console.print(render_models(doc.get("models", [])))
    for device, info in sorted((doc.get("memory") or {}).items()):
        where = "host RAM" if device == "cpu" else f"GPU {device}"
        console.print(f"{where}: {_bytes(info.get('used'))} used by models; {info.get('source')}", markup=False)
    if doc.get("config_error"):
        console.print(f"[red]last reload refused:[/] {doc['config_error']}")
    return 0


def render_models(rows: list[dict[str, Any]]) -> Any:
    """A rich table of ``/status`` model rows (``ModelScheduler.snapshot``)."""
    from rich.table import Table
    from rich.text import Text

    table = Table()
    for col in ("model", "state", "device", "memory", "idle", "unloads in", "in flight", "queued", "loads", "note"):
        table.add_column(col)
    for r in rows:
        state = str(r.get("state", "?"))
        devices = ", ".join("CPU" if d == "cpu" else f"GPU {d}" for d in r.get("devices") or [])
        unload = (
            "pinned" if r.get("pinned") else ("never" if r.get("ttl_s") is None else duration(r.get("unload_in_s")))
        )
        if state == "loading" and r.get("loading_s") is not None:
            state += f" {duration(r['loading_s'])}"
        table.add_row(
            str(r.get("model")),
            Text(state, style=MODEL_STYLES.get(str(r.get("state")), "")),
            devices or "-",
            _bytes(r.get("memory_bytes")),
            duration(r.get("idle_s")),
            unload,
            str(r.get("in_flight", 0)),
            str(r.get("queued", 0)),
            str(r.get("loads", 0)),
            Text((r.get("reason") or "").splitlines()[0][:80] if r.get("reason") else ""),
        )
    return table


def _bytes(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "-"
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def load(name: str, timeout: float = 900.0) -> int:
    """Load model ``name`` (evicting idle ones when memory is short) and wait until it serves."""
    if statefile.read_live() is None:
        return _fail(0, NOT_RUNNING)  # before "loading ...": nothing is loading
    print(f"loading {name} ...", flush=True)
    status, doc = _request("POST", "/models/load", {"model": name}, timeout=timeout)
    if status != 200:
        return _fail(status, doc)
    seconds = doc.get("last_load_s")
    print(f"{doc.get('model')}: {doc.get('state')}" + (f" (loaded in {seconds:.1f} s)" if seconds else ""))
    return 0


def unload(name: str, timeout: float = 900.0) -> int:
    """Unload model ``name`` after its requests in flight finish."""
    status, doc = _request("POST", "/models/unload", {"model": name}, timeout=timeout)
    if status != 200:
        return _fail(status, doc)
    print(f"{doc.get('model')}: {doc.get('state')}")
    return 0


def reload() -> int:
    """Make the running orchestrator re-read its models.yaml; exit status 1 (with the located error)
    when the file is invalid or the change needs a restart (the running config stays)."""
    status, doc = _request("POST", "/reload", timeout=900.0)
    if status != 200:
        return _fail(status, doc)
    print(f"reloaded: {doc.get('summary')}")
    return 0
