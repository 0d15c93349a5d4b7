#!/usr/bin/env python3
"""Replay coding-agent sessions, before and after, and print per turn what the prompt cache saved.

    orchestrator bench agent [RECORDING.json ...] [--scenarios PATTERN,...] [--sides after,before]
                             [--parallel 1,2] [--preserve-thinking null|true|false] [--ctx 32768]
                             [--max-tokens 8] [--swap-at 4] [--extra-args "..."] [--json FILE]
                             [--markdown FILE]

A recording (default: every file under ``tests/data/agent_sessions/``) is the list of request
bodies a real client sent, turn by turn (Claude Code's ``/v1/messages``, Codex's ``/v1/responses``,
opencode's chat requests; recorded with ``scripts/capture_agent.py``). The scenarios are built from
them (``orchestrator/bench/agent_scenarios.py``; ``--scenarios list`` names them all): a user turn
after a tool chain with thinking on and off, two sessions sharing a long system prompt taking turns
or in flight at once, side requests (a title, a summary) between turns, an unload and reload in the
middle, and the plain replay. With recordings named on the command line every scenario of those
runs; without, the issue's set (``DEFAULT``).

Each scenario runs on each side in a fresh ``orchestrator up`` of the demo model (its own state
folder, a free port, ``parallel`` slots of ``--ctx`` tokens each):

- ``after``: through the endpoint, ``preserve_thinking`` as ``--preserve-thinking`` says (null: on
  where the template allows it);
- ``before``: the stack as it was before: the stock template (``preserve_thinking: false``) and
  straight to the model's llama-server, without the endpoint's conversation slots, repairs or
  pings (Codex's Responses requests, which llama-server refuses, through the endpoint);
- ``stock``: through the endpoint with the stock template; ``direct``: straight to llama-server
  with the template as ``after`` has it.

Requests are streamed with the answer cut to ``--max-tokens``. Per turn it prints the HTTP status,
the prompt, new (this prompt minus the same session's previous one), cached and processed prompt
tokens from the API's own usage, TTFT (first output event) and the longest silence (the largest gap
between arrivals of bytes, SSE comments and pings included, the first counted from sending), and
whether the turn processed at most its new tokens + 64; then each scenario's summary, and per
``--parallel`` a markdown table of the sides side by side with ratios to the first.
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
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from orchestrator.bench import agent_report as report
from orchestrator.bench import agent_scenarios as sc
from orchestrator.bench.agent_shapes import RESPONSES, streamed
from orchestrator.bench.agent_stream import Answer, stream_call
from orchestrator.host.process import die_with_parent

REPO = Path(__file__).resolve().parents[1]
SESSIONS = REPO / "tests" / "data" / "agent_sessions"
# side -> (path, preserve_thinking: "as-configured" or the value)
SIDES: dict[str, tuple[str, Any]] = {
    "after": ("endpoint", "as-configured"),
    "before": ("direct", False),
    "stock": ("endpoint", False),
    "direct": ("direct", "as-configured"),
}


def _config(work: Path, args: argparse.Namespace, parallel: int, preserve: bool | None) -> Path:
    yaml = work / "models.yaml"
    extra_yaml = json.dumps(shlex.split(args.extra_args))
    models = ""
    for name in ("demo", "other"):
        models += (
            f"  - name: {name}\n    path: builtin:tiny-mtp\n    ctx_size: {args.ctx * parallel}\n"
            f"    parallel: {parallel if name == 'demo' else 1}\n    thinking: false\n"
            f"    allow_ctx_beyond_trained: true\n    preserve_thinking: {json.dumps(preserve)}\n"
            f"    load: {'on_start' if name == 'demo' else 'on_demand'}\n    extra_args: {extra_yaml}\n"
        )
        if args.threads is not None:
            models += f"    threads: {args.threads}\n"
    yaml.write_text("server:\n  port: 0\nmodels:\n" + models)
    return yaml


class Up:
    """``orchestrator up`` as a child in its own process group, with its own state folder."""

    def __init__(self, config: Path, state: Path) -> None:
        self.state = state
        self.log = open(state.parent / "up.log", "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli.app", "up", "-c", str(config)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "ORCHESTRATOR_STATE": str(state), "ORCHESTRATOR_KV": str(state / "kv")},
            start_new_session=True,
            preexec_fn=die_with_parent(),  # killed with this script, never left serving on its own
        )

    def run(self) -> dict[str, Any]:
        path = self.state / "run.json"
        with contextlib.suppress(ValueError, OSError):
            return dict(json.loads(path.read_text()))
        return {}

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
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.log.close()


def swap(up: Up, endpoint: str, reload: bool) -> str:
    """Unload the demo model and load ``other`` with one request; with ``reload`` load the demo
    again (straight to llama-server nothing else would); the demo's llama-server URL."""
    with httpx.Client(timeout=300, trust_env=False) as client:
        client.post(endpoint + "/models/unload", json={"model": "demo"}).raise_for_status()
        body = {"model": "other", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
        client.post(endpoint + "/v1/chat/completions", json=body).raise_for_status()
        if not reload:
            return ""
        client.post(endpoint + "/models/load", json={"model": "demo"}).raise_for_status()
    return up.wait_ready()[1]


def send_step(clients: dict[str, httpx.Client], base: str, step: list[sc.Call], max_tokens: int) -> list[Answer]:
    """The step's calls, at once when there are several (each session on its own connection)."""
    for call in step:
        clients.setdefault(call.session, httpx.Client(timeout=900, trust_env=False))
    bodies = [streamed(c.body, c.route, max_tokens) for c in step]
    if len(step) == 1:
        return [stream_call(clients[step[0].session], base + step[0].route, step[0].route, bodies[0])]
    answers: list[Answer | None] = [None] * len(step)
    gate = threading.Barrier(len(step))

    def one(i: int) -> None:
        gate.wait()
        answers[i] = stream_call(clients[step[i].session], base + step[i].route, step[i].route, bodies[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(step))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [a or Answer(status=0, error="not sent") for a in answers]


def run_scenario(scenario: sc.Scenario, up: Up, path: str, args: argparse.Namespace) -> list[report.Turn]:
    endpoint, direct = up.wait_ready()
    sent: list[tuple[int, str, Answer]] = []
    clients: dict[str, httpx.Client] = {}
    try:
        for n, step in enumerate(scenario.steps, start=1):
            if n == scenario.swap_before:
                direct = swap(up, endpoint, reload=path == "direct") or direct
            base = endpoint if path == "endpoint" else direct
            for call, answer in zip(step, send_step(clients, base, step, args.max_tokens), strict=True):
                sent.append((n, call.session, answer))
    finally:
        for client in clients.values():
            client.close()
    return report.turns(sent)


def one_run(scenario: sc.Scenario, side: str, parallel: int, args: argparse.Namespace) -> list[report.Turn]:
    """The scenario on one side in a fresh ``orchestrator up``."""
    path, preserve = SIDES[side]
    preserve = args.preserve_thinking if preserve == "as-configured" else preserve
    if path == "direct" and scenario.route == RESPONSES:
        path = "endpoint"  # llama-server refuses Codex's requests (developer messages, namespace tools)
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp:
        work = Path(tmp)
        (work / "state").mkdir()
        up = Up(_config(work, args, parallel, preserve), work / "state")
        try:
            rows = run_scenario(scenario, up, path, args)
        finally:
            up.stop()
    print(f"\n{scenario.name} [{side}: {path}, preserve_thinking {json.dumps(preserve)}, parallel {parallel}]")
    print(f"  {scenario.about}")
    for line in report.turn_table(rows):
        print("  " + line)
    print("  " + report.summary_line(report.summarize(rows)), flush=True)
    return rows


def _commit() -> str:
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True, check=False).stdout.strip()

    changed = len(git("status", "--short", "--", "orchestrator", "native", "scripts").splitlines())
    return (git("rev-parse", "--short", "HEAD") or "unknown") + (f" + {changed} uncommitted files" if changed else "")


def _preserve(text: str) -> bool | None:
    value = {"null": None, "true": True, "false": False}.get(text.lower(), "bad")
    if value == "bad":
        raise argparse.ArgumentTypeError("null, true or false")
    return None if value is None else bool(value)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "recordings", nargs="*", type=Path, help="recorded sessions (default: every one in tests/data/agent_sessions)"
    )
    parser.add_argument(
        "--scenarios",
        default="",
        metavar="PATTERNS",
        help="shell patterns, comma-separated ('list' names them; default: "
        "every scenario of the recordings named, else the default set)",
    )
    parser.add_argument("--sides", default="after,before", help=f"of {', '.join(SIDES)}; the first is the base")
    parser.add_argument("--parallel", default="1", help="slots of the model, comma-separated: one table each")
    parser.add_argument(
        "--preserve-thinking", type=_preserve, default=None, metavar="null|true|false", help="the after side's"
    )
    parser.add_argument("--ctx", type=int, default=32768, help="context tokens per slot")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--threads", type=int, help="llama-server threads per model (default: its own, one per core)")
    parser.add_argument("--swap-at", type=int, default=sc.SWAP_AT, help="the swap scenario's turn")
    parser.add_argument("--extra-args", default="", help="llama-server flags for the models (shell words)")
    parser.add_argument("--json", type=Path, help="write every turn and summary here too")
    parser.add_argument("--markdown", type=Path, help="write the side-by-side tables here too")
    args = parser.parse_args(argv)
    bad = [s for s in args.sides.split(",") if s not in SIDES]
    if bad:
        parser.error(f"--sides: unknown {bad} (of {', '.join(SIDES)})")
    return args


def scenarios(args: argparse.Namespace) -> list[sc.Scenario]:
    files = args.recordings or sorted(SESSIONS.glob("*.json"))
    recordings = [sc.recording(p.stem, json.loads(p.read_text())) for p in files]
    every = sc.every_scenario(recordings, args.swap_at)
    if args.scenarios == "list":
        for s in every:
            print(f"{s.name:<44} {s.about}")
        raise SystemExit(0)
    patterns = args.scenarios.split(",") if args.scenarios else (["*"] if args.recordings else list(sc.DEFAULT))
    try:
        return sc.select(every, patterns)
    except ValueError as err:
        raise SystemExit(f"--scenarios: {err} (--scenarios list names them)") from err


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    chosen = scenarios(args)
    sides = args.sides.split(",")
    results: dict[str, Any] = {"commit": _commit(), "sides": sides, "runs": {}}
    tables: list[str] = []
    for parallel in [int(p) for p in args.parallel.split(",")]:
        summaries: dict[str, dict[str, report.Summary]] = {}
        for scenario in chosen:
            for side in sides:
                rows = one_run(scenario, side, parallel, args)
                summary = report.summarize(rows)
                summaries.setdefault(scenario.name, {})[side] = summary
                key = f"parallel={parallel}/{side}/{scenario.name}"
                results["runs"][key] = {"turns": [asdict(r) for r in rows], "summary": asdict(summary)}
        tables += [f"\nparallel: {parallel} (commit {results['commit']})\n", *report.side_by_side(sides, summaries)]
    print("\n".join(tables))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.markdown:
        args.markdown.write_text("\n".join(tables).lstrip() + "\n")


if __name__ == "__main__":
    main()
