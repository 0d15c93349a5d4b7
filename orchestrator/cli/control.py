"""``orchestrator status``, ``logs`` and ``down``: talk to a running ``orchestrator up``.

They find it through ``run.json`` (``statefile``): its pid, endpoint, API key and log paths.
``status`` asks the live endpoint (``GET /status``) and falls back to what ``run.json`` says
when the endpoint does not answer.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.errors import UserError
from orchestrator.host import statefile

NOT_RUNNING = "no orchestrator is running (start one with `orchestrator up`)"


def _rows_from_status(doc: Any) -> list[dict[str, Any]]:
    """Instance rows from a ``/status`` body: ``{"instances": [...]}`` or a bare list."""
    if isinstance(doc, dict):
        doc = doc.get("instances", [])
    return [r for r in doc if isinstance(r, dict)] if isinstance(doc, list) else []


def fetch_peers(run: dict[str, Any], timeout: float = 5.0) -> dict[str, Any] | None:
    """``GET <endpoint>/peers`` (peers, their health, where requests went); None when it does not answer."""
    import httpx

    headers = {"Authorization": f"Bearer {run['api_key']}"} if run.get("api_key") else {}
    try:
        resp = httpx.get(f"{run['endpoint']}/peers", headers=headers, timeout=timeout, trust_env=False)
        resp.raise_for_status()
        found: dict[str, Any] = resp.json()
        return found
    except (httpx.HTTPError, ValueError):
        return None


def fetch_disk_faults(run: dict[str, Any], timeout: float = 5.0) -> list[dict[str, Any]]:
    """The writes failing now (``/health``'s ``disk``: full, read-only or forbidden folders)."""
    import httpx

    headers = {"Authorization": f"Bearer {run['api_key']}"} if run.get("api_key") else {}
    try:
        resp = httpx.get(f"{run['endpoint']}/health", headers=headers, timeout=timeout, trust_env=False)
        found = resp.json().get("disk") or []
    except (httpx.HTTPError, ValueError, AttributeError):
        return []
    return [f for f in found if isinstance(f, dict)] if isinstance(found, list) else []


def fetch_status(run: dict[str, Any], timeout: float = 5.0) -> list[dict[str, Any]] | None:
    """``GET <endpoint>/status`` with the API key; None when it does not answer with JSON."""
    doc = fetch_status_doc(run, timeout)
    return None if doc is None else _rows_from_status(doc)


def fetch_status_doc(run: dict[str, Any], timeout: float = 5.0) -> Any:
    """The whole ``GET <endpoint>/status`` body; None when it does not answer with JSON."""
    import httpx

    headers = {"Authorization": f"Bearer {run['api_key']}"} if run.get("api_key") else {}
    try:
        resp = httpx.get(f"{run['endpoint']}/status", headers=headers, timeout=timeout, trust_env=False)
        resp.raise_for_status()
        return resp.json()
    except (httpx.HTTPError, ValueError):
        return None


def status(json_out: bool = False) -> int:
    """Print the running orchestrator's instances; exit status 1 when none is running.

    Columns: state, pid, port, GPUs, model, uptime, restarts, requests, decode tok/s,
    acceptance so far, warnings; for FAILED instances the last exit code and log tail.
    """
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=200)  # a pipe: keep rows whole rather than 80 columns
    run = statefile.read_live()
    if run is None:
        print(NOT_RUNNING, file=sys.stderr)
        return 1
    doc = fetch_status_doc(run)
    rows = None if doc is None else _rows_from_status(doc)
    drafts = doc.get("draft_policy") if isinstance(doc, dict) else None
    source = "endpoint"
    if rows is None:
        source = "run.json (the endpoint did not answer)"
        rows = [{"name": name, **info} for name, info in (run.get("instances") or {}).items()]
    peers = fetch_peers(run) if source == "endpoint" else None
    if json_out:
        out = {"pid": run.get("pid"), "endpoint": run.get("endpoint"), "source": source, "instances": rows}
        out.update({"peers": peers} if peers else {})
        print(json.dumps({**out, **({"draft_policy": drafts} if drafts else {})}, indent=2))
        return 0
    console.print(f"orchestrator pid {run.get('pid')}, endpoint {run.get('endpoint')} (from {source})", markup=False)
    console.print(render_status(rows))
    for row in rows:
        if row.get("state") == "failed":
            console.print(
                f"\n{row.get('name')} failed (exit code {row.get('exit_code')}): {row.get('message') or ''}",
                markup=False,
            )
            for line in row.get("log_tail") or []:
                console.print(f"  | {line}", markup=False)
    _print_settings(console, rows)
    _print_features_off(console, rows)
    _print_peers(console, peers)
    for fault in fetch_disk_faults(run) if source == "endpoint" else []:
        console.print(
            f"disk: cannot write {fault.get('what')} ({fault.get('path')}): {fault.get('error')}, "
            f"{fault.get('count')} time(s) since {time.strftime('%H:%M:%S', time.localtime(fault.get('since') or 0))}; "
            "serving goes on",
            markup=False,
        )
    _print_drafts(console, drafts)
    _print_sessions(console, doc)
    return 0


def _print_sessions(console: Any, doc: Any) -> None:
    """Per model: its latest client sessions and how much of their prompts came from the cache."""
    for model in (doc or {}).get("models") or []:
        sessions = (model.get("kv") or {}).get("sessions") or []
        if sessions:
            console.print(f"prompt cache of {model.get('model')} per session (latest first):", markup=False)
        for s in sessions:
            rate = "-" if s.get("hit_rate") is None else f"{s['hit_rate']:.0%}"
            last = s.get("last") or {}
            console.print(
                f"  {str(s.get('session'))[:40]}: {s.get('requests')} requests, {rate} of prompt tokens cached "
                f"({s.get('cached_tokens')} cached, {s.get('processed_tokens')} processed); last request "
                f"{last.get('cached_tokens')} cached, {last.get('processed_tokens')} processed",
                markup=False,
            )


def _print_drafts(console: Any, drafts: Any) -> None:
    """Per model with ``speculative.adaptive``: its last draft-length choices and why."""
    for model, policy in (drafts or {}).items():
        recent = policy.get("recent") or []
        counts: dict[str, int] = {}
        for c in recent:
            counts[f"K={c['k']} {c['reason']}"] = counts.get(f"K={c['k']} {c['reason']}", 0) + 1
        summary = ", ".join(f"{k}: {n}" for k, n in sorted(counts.items())) or "no request yet"
        console.print(f"draft length of {model} (adaptive, K in {policy.get('ks')}): {summary}", markup=False)
        for c in recent[:5]:
            done = f"{c.get('tokens_per_second', '-')} tok/s, accepted {c.get('accepted', '-')}"
            console.print(f"  {c['class']}: K={c['k']} ({c['reason']}); {done}", markup=False)


def _print_settings(console: Any, rows: list[dict[str, Any]]) -> None:
    """Per instance: each models.yaml key that becomes a flag, what models.yaml asked (or llama-server's
    default, as its --help states it, for a key left out) and what the running llama-server reports."""
    for row in rows:
        settings = row.get("settings") or []
        if not settings:
            continue
        console.print(f"settings of {row.get('name')} (models.yaml -> llama-server reports):", markup=False)
        for s in settings:
            asked = s.get("asked")
            default = s.get("default") or "unstated"
            wanted = asked if asked is not None else f"(left out: llama-server's default {default})"
            seen = s.get("effective")
            differs = seen is not None and asked is not None and not _same_setting(asked, seen)
            said = "not reported" if seen is None else seen + ("   <- differs" if differs else "")
            console.print(f"  {s.get('key')}: {wanted} -> {said}", markup=False, soft_wrap=True)


def _same_setting(asked: str, seen: str) -> bool:
    """Whether a reported value is the asked one: numbers compare as numbers, paths as given, and
    an asked value with its flag in parentheses ("enabled (--chat-template-kwargs ...)") by its word."""
    asked = asked.split(" (", 1)[0]
    try:
        return float(asked) == float(seen)
    except ValueError:
        return asked == seen or asked.endswith(seen) or seen.endswith(asked)


def _print_features_off(console: Any, rows: list[dict[str, Any]]) -> None:
    """The features of our patches the running llama-server lacks (an adopted one), once each."""
    off = list(dict.fromkeys(line for row in rows for line in row.get("features_off") or []))
    if off:
        console.print("\nllama-server without our patches (build.llama_server); off:", markup=False)
        for line in off:
            console.print(f"  - {line}", markup=False, soft_wrap=True)


def _print_peers(console: Any, peers: dict[str, Any] | None) -> None:
    """Peers (health, models) and where requests went, when models.yaml has ``peers:``."""
    if not peers or not peers.get("peers"):
        return
    for p in peers["peers"]:
        health = {True: "up", False: f"DOWN ({p.get('last_error')})", None: "not checked yet"}[p.get("healthy")]
        console.print(f"peer {p['name']} {p['url']}: {health}; models {', '.join(p['models']) or '-'}", markup=False)
    routed = ", ".join(f"{r['model']} -> {r['target']}: {r['requests']}" for r in peers.get("routed", []))
    console.print(f"requests routed: {routed or 'none yet'}", markup=False)


def render_status(rows: list[dict[str, Any]]) -> Any:
    """A rich table of ``/status`` rows (see ``orchestrator.supervise.status.status_row``)."""
    from rich.table import Table
    from rich.text import Text

    from orchestrator.cli.format import STATE_STYLES, duration

    table = Table()
    for col in (
        "instance",
        "state",
        "pid",
        "port",
        "GPUs",
        "model",
        "uptime",
        "restarts",
        "requests",
        "decode tok/s",
        "acceptance",
        "warnings",
    ):
        table.add_column(col)
    for r in rows:
        state = str(r.get("state", "?"))
        acc = r.get("acceptance")
        tps = r.get("decode_tps")
        spec = r.get("speculation")
        acc_text = f"{acc:.2f}" if isinstance(acc, (int, float)) else (spec or "-")
        warnings = list(r.get("warnings") or [])
        if state == "failed" and r.get("exit_code") is not None:
            warnings.insert(0, f"exit code {r['exit_code']}")
        table.add_row(
            str(r.get("name")),
            Text(state, style=STATE_STYLES.get(state, "")),
            str(r.get("pid") or "-"),
            str(r.get("port") or (r.get("base_url") or "-").rsplit(":", 1)[-1]),
            ",".join(map(str, r.get("gpus") or [])) or "CPU",
            str(r.get("model") or "-"),
            duration(r.get("uptime_s")),
            str(r.get("restarts", "-")),
            str(r.get("requests", "-")),
            f"{tps:.1f}" if isinstance(tps, (int, float)) else "-",
            acc_text,
            Text("; ".join(warnings)),
        )
    return table


def _log_paths() -> dict[str, Path]:
    run = statefile.read()
    if run and run.get("instances"):
        return {name: Path(info["log"]) for name, info in run["instances"].items() if info.get("log")}
    # no orchestrator running: the logs of the last run stay in the state dir
    return {p.stem: p for p in sorted(statefile.log_dir().glob("*.log"))}


def logs(name: str, follow: bool = False, lines: int = 50) -> int:
    """Print the last ``lines`` lines of instance ``name``'s llama-server log; ``follow`` tails it.

    Raises:
        UserError: a negative ``lines``; unknown instance name (the message lists the known ones).
    """
    if lines < 0:
        raise UserError(f"--lines must be >= 0, got {lines}", hint="e.g. -n 100 (0 prints nothing before --follow)")
    known = _log_paths()
    path = known.get(name)
    replicas = [n for n in known if n.startswith(f"{name}-") and n[len(name) + 1 :].isdigit()]
    if path is None and len(replicas) == 1:
        path = known[replicas[0]]  # a model name with one replica: its one log (`logs demo` is `logs demo-0`)
    if path is None or not path.is_file():
        names = ", ".join(sorted(known)) or "none (no orchestrator has run yet)"
        raise UserError(
            f"no log for instance {name!r}; known instances: {names}",
            hint="names look like <model>-<replica>, e.g. demo-0",
        )
    with open(path, encoding="utf-8", errors="replace") as fh:
        tail = fh.readlines()[-lines:] if lines > 0 else []
        sys.stdout.writelines(tail)
        sys.stdout.flush()
        if not follow:
            return 0
        while True:  # ends with Ctrl-C (the CLI turns it into exit status 130)
            chunk = fh.read()
            if chunk:
                sys.stdout.write(chunk)
                sys.stdout.flush()
            else:
                time.sleep(0.25)


def down(timeout: float = 30.0) -> int:
    """SIGTERM the running orchestrator, wait up to ``timeout`` s, report; SIGKILL if it hangs.

    Its children die with it either way (it stops them on SIGTERM; the parent-death signal
    covers a SIGKILL). Returns 0 when it stopped, 1 when none was running.

    Raises:
        UserError: a negative ``timeout``.
    """
    if timeout < 0:
        raise UserError(f"--timeout must be >= 0 seconds, got {timeout:g}", hint="e.g. --timeout 30")
    run = statefile.read_live()
    if run is None:
        print(NOT_RUNNING, file=sys.stderr)
        return 1
    pid = int(run["pid"])
    print(f"stopping orchestrator pid {pid} ...", flush=True)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:  # it exited between read_live() and here
        print("stopped")
        return 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not statefile.is_live(run):
            print("stopped")
            return 0
        time.sleep(0.2)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        print("stopped")
        return 0
    print(f"it did not stop within {timeout:g} s; sent SIGKILL (its llama-servers die with it)")
    return 0
