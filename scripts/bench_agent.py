#!/usr/bin/env python3
"""Replay recorded coding-agent sessions and print, per turn, what the prompt cache saved.

    python scripts/bench_agent.py [SESSION.json ...] [--ctx 32768] [--paths endpoint,direct]
                                  [--swap-at N] [--max-tokens 8] [--extra-args "..."]

Each session (default: every file under ``tests/data/agent_sessions/``) is the list of request
bodies a real client sent, turn by turn (Claude Code's ``/v1/messages``, Codex's ``/v1/responses``,
opencode's chat requests; recorded with ``scripts/capture_agent.py``). The script starts
``orchestrator up`` on the demo model (its own state folder, a free port, ``ctx_size`` from
``--ctx``) and sends each session's requests in order, streamed, with ``max_tokens`` cut to
``--max-tokens``: once through the endpoint, and once straight to the model's llama-server (the
slot is erased in between so neither path finds the other's cache). Per turn it prints the HTTP
status, the prompt tokens, the new tokens (this prompt minus the previous one), the cached and
processed prompt tokens read from the API's own usage (Anthropic ``cache_read_input_tokens`` and
``input_tokens``; Responses and chat ``input_tokens_details.cached_tokens`` /
``prompt_tokens_details.cached_tokens``), the time to the first streamed event of the answer
(TTFT), and whether the turn processed at most its new tokens plus 64.

``--swap-at N`` unloads the model before turn N and loads a second one (``other``, the same demo
file under another name) with one request, so turn N reloads the session's model: with
``kv_persist`` its saved slot is restored. Straight to llama-server there is no swap.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
SESSIONS = REPO / "tests" / "data" / "agent_sessions"
SLACK = 64  # tokens a turn may process beyond its new ones (the checkpoint before the prompt's end)


def _config(work: Path, ctx: int, extra: list[str]) -> Path:
    yaml = work / "models.yaml"
    extra_yaml = json.dumps(extra)
    models = ""
    for name in ("demo", "other"):
        models += (
            f"  - name: {name}\n    path: builtin:tiny-mtp\n    ctx_size: {ctx}\n    parallel: 1\n"
            f"    threads: 2\n    thinking: false\n    allow_ctx_beyond_trained: true\n"
            f"    load: {'on_start' if name == 'demo' else 'on_demand'}\n    extra_args: {extra_yaml}\n"
        )
    yaml.write_text("server:\n  port: 0\nmodels:\n" + models)
    return yaml


class Up:
    """``orchestrator up`` as a child in its own process group."""

    def __init__(self, config: Path, state: Path) -> None:
        self.state = state
        self.log = open(state.parent / "up.log", "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli.app", "up", "-c", str(config)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "ORCHESTRATOR_STATE": str(state), "ORCHESTRATOR_KV": str(state / "kv")},
            start_new_session=True,
        )

    def run(self) -> dict[str, Any]:
        path = self.state / "run.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    def wait_ready(self, timeout: float = 300) -> tuple[str, str]:
        """(endpoint URL, the demo replica's llama-server URL)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.run()
            inst = run.get("instances", {}).get("demo-0", {})
            if run.get("endpoint") and inst.get("state") == "ready" and inst.get("base_url"):
                return run["endpoint"], inst["base_url"]
            if self.proc.poll() is not None:
                break
            time.sleep(0.3)
        self.stop()
        raise SystemExit("orchestrator up did not get ready:\n" + (self.state.parent / "up.log").read_text()[-3000:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.log.close()


def load_session(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    return {"name": path.stem, "route": data["route"], "requests": data["requests"]}


def _cut(body: dict[str, Any], route: str, max_tokens: int) -> dict[str, Any]:
    body = {**body, "stream": True}
    if route.endswith("/responses"):
        body["max_output_tokens"] = max_tokens
    else:
        body["max_tokens"] = max_tokens
    if route.endswith("/chat/completions"):
        body["stream_options"] = {"include_usage": True}
    return body


def _usage(route: str, event: dict[str, Any], seen: dict[str, int]) -> None:
    """Prompt token counts from one stream event, into ``seen`` (total, cached)."""
    if route.endswith("/messages"):
        usage = (event.get("message") or {}).get("usage") if event.get("type") == "message_start" else None
        if usage:
            cached = int(usage.get("cache_read_input_tokens") or 0)
            seen.update(total=int(usage.get("input_tokens", 0)) + cached, cached=cached)
    elif route.endswith("/responses"):
        usage = (event.get("response") or {}).get("usage") if event.get("type") == "response.completed" else None
        if usage:
            seen.update(total=int(usage["input_tokens"]), cached=int(usage["input_tokens_details"]["cached_tokens"]))
    elif event.get("usage"):
        usage = event["usage"]
        details = usage.get("prompt_tokens_details") or {}
        seen.update(total=int(usage["prompt_tokens"]), cached=int(details.get("cached_tokens") or 0))


def one_turn(client: httpx.Client, base: str, route: str, body: dict[str, Any]) -> dict[str, Any]:
    """Send one streamed request; return status, token counts and TTFT."""
    seen: dict[str, int] = {}
    ttft = None
    started = time.perf_counter()
    with client.stream("POST", base + route, json=body, headers={"x-api-key": "none"}) as resp:
        if resp.status_code != 200:
            return {"status": resp.status_code, "error": resp.read().decode(errors="replace")[:300]}
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            etype = str(event.get("type", ""))
            if ttft is None and ("delta" in etype or etype == "message_start" or "choices" in event):
                ttft = time.perf_counter() - started
            if etype == "error" or ("error" in event and not etype):
                return {"status": 200, "error": json.dumps(event)[:300]}
            _usage(route, event, seen)
    return {"status": 200, "ttft": ttft, **seen}


def replay(session: dict[str, Any], base: str, args: argparse.Namespace, swap: Any = None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    prev_total = None
    with httpx.Client(timeout=900, trust_env=False) as client:
        for n, body in enumerate(session["requests"], start=1):
            if swap is not None and n == args.swap_at:
                swap(client)
            row = one_turn(client, base, session["route"], _cut(body, session["route"], args.max_tokens))
            row["turn"] = n
            if "total" in row:
                # a turn after a failed (or no) turn has no new-token count: it is a first turn again
                row["processed"] = row["total"] - row["cached"]
                row["new"] = row["total"] - prev_total if prev_total is not None else None
                row["ok"] = row["new"] is None or row["processed"] <= row["new"] + SLACK
            prev_total = row.get("total")
            rows.append(row)
    return rows


def print_table(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    print(f"{'turn':>4} {'HTTP':>4} {'prompt':>7} {'new':>6} {'cached':>7} {'processed':>9} {'TTFT s':>7}  <= new+64")
    for r in rows:
        if "total" not in r:
            print(f"{r['turn']:>4} {r['status']:>4}  {r.get('error', '')[:110]}")
            continue
        ttft = f"{r['ttft']:.2f}" if r.get("ttft") is not None else "-"
        ok = "-" if r["new"] is None else ("yes" if r["ok"] else "NO")
        new = "-" if r["new"] is None else r["new"]
        print(
            f"{r['turn']:>4} {r['status']:>4} {r['total']:>7} {new:>6} {r['cached']:>7} "
            f"{r['processed']:>9} {ttft:>7}  {ok}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sessions", nargs="*", type=Path)
    parser.add_argument("--ctx", type=int, default=32768)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--paths", default="endpoint,direct")
    parser.add_argument("--swap-at", type=int, default=0)
    parser.add_argument("--extra-args", default="", help="llama-server flags for the models (shell words)")
    parser.add_argument("--json", type=Path, help="write every row here too")
    args = parser.parse_args()
    paths = args.sessions or sorted(SESSIONS.glob("*.json"))
    sessions = [load_session(p) for p in paths]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp:
        work = Path(tmp)
        (work / "state").mkdir()
        up = Up(_config(work, args.ctx, shlex.split(args.extra_args)), work / "state")
        try:
            for session in sessions:
                for path in args.paths.split(","):
                    endpoint, direct = up.wait_ready()  # a swap reloads the model on another port
                    httpx.post(direct + "/slots/0?action=erase", timeout=60)
                    base = endpoint if path == "endpoint" else direct
                    swap = _swapper(endpoint) if path == "endpoint" and args.swap_at else None
                    rows = replay(session, base, args, swap)
                    title = f"{session['name']} ({session['route']}) via {path}"
                    if swap is not None:
                        title += f", model swapped out and back before turn {args.swap_at}"
                    print_table(title, rows)
                    results[f"{session['name']}/{path}"] = rows
        finally:
            up.stop()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


def _swapper(endpoint: str) -> Any:
    def swap(client: httpx.Client) -> None:
        client.post(endpoint + "/models/unload", json={"model": "demo"}).raise_for_status()
        body = {"model": "other", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
        client.post(endpoint + "/v1/chat/completions", json=body).raise_for_status()

    return swap


if __name__ == "__main__":
    main()
