#!/usr/bin/env python
"""How fast a model recovers from a frozen slot and from a crash, through the real ``orchestrator up``.

One run of ``orchestrator up`` (the real CLI, production supervisor rules) on one model:

1. **frozen slot**: a request that spins llama-server's main loop (``"samplers": "i"``, sent
   straight to the child: the proxy refuses it) freezes the model while its ``/health`` says ok.
   A chat request through the endpoint is sent at once and then again until one succeeds. Printed:
   what the stuck request got, and the seconds from the freeze to the first success (the stall
   timeout ``server.timeouts.stall`` + the backoff + the reload).
2. **isolated crash**: after ``stable_after`` seconds of serving, ``kill -9`` of the child, then a
   chat request through the endpoint at once. Printed: seconds from the kill to its success,
   next to the new child's load time (spawn -> ready, from ``/status``).
3. with ``--fuzz``: the generated-bodies test (``tests/serve/test_fuzz_routes.py``) runs once with
   ``--examples`` bodies per POST route and its counts by status are printed.

    python scripts/measure_recovery.py [--model PATH] [--stall 30] [--fuzz --examples 40]

The default model is the tiny demo model (``orchestrator.models.tiny.demo_model()``). Seconds.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from orchestrator.host.process import die_with_parent
from orchestrator.supervise.states import SupervisorPolicy

CHAT = {"model": "demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
FREEZE = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "samplers": "i"}
POLL = 0.05


def write_config(folder: Path, model: Path, stall: float) -> Path:
    path = folder / "models.yaml"
    path.write_text(
        f"server: {{host: 127.0.0.1, port: 0, timeouts: {{load: 300, stall: {stall:g}}}}}\n"
        f"models:\n  - name: demo\n    path: {model}\n    ctx_size: 1024\n    parallel: 2\n    threads: 2\n"
    )
    return path


def wait_ready(proc: subprocess.Popen[bytes], state: Path, timeout: float = 600) -> str:
    """The endpoint URL once every instance in run.json is ready."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"orchestrator up exited with {proc.returncode}")
        try:
            run = json.loads((state / "run.json").read_text())
            states = [i["state"] for i in run["instances"].values()]
            if states and all(s in ("ready", "degraded") for s in states):
                return str(run["endpoint"])
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(POLL)
    raise SystemExit("not ready in time")


def row(url: str) -> dict[str, Any]:
    rows: list[dict[str, Any]] = httpx.get(url + "/status", timeout=10).json()
    return rows[0]


def until_success(client: httpx.Client, url: str, since: float) -> tuple[float, list[str]]:
    """Send chat requests through the endpoint until one is a 200: seconds since ``since``, failures seen."""
    failures = []
    while True:
        response = client.post(url + "/v1/chat/completions", json=CHAT)
        if response.status_code == 200:
            return time.monotonic() - since, failures
        failures.append(f"{response.status_code} {response.json().get('error', {}).get('code')}")


def measure_freeze(url: str) -> None:
    child = row(url)["base_url"]
    with concurrent.futures.ThreadPoolExecutor(1) as pool, httpx.Client(timeout=600) as client:
        frozen_at = time.monotonic()
        stuck = pool.submit(httpx.post, child + "/v1/chat/completions", json=FREEZE, timeout=600)
        time.sleep(0.5)  # let the freezing request reach the main loop first
        recovered, failures = until_success(client, url, frozen_at)
        try:
            stuck_answer = f"HTTP {stuck.result(timeout=60).status_code}"
        except httpx.HTTPError as err:
            stuck_answer = type(err).__name__
    after = row(url)
    print(f"frozen slot -> first success through the endpoint: {recovered:.2f} s")
    print(f"  requests that failed meanwhile: {failures or 'none (held until the restart)'}")
    print(f"  the freezing request (direct to the child): {stuck_answer}; stalls {after['stalls']}")
    print(f"  reload of the restarted child: {after['ready_at'] - after['started_at']:.2f} s")


def measure_crash(url: str, stable_after: float) -> None:
    before = row(url)
    wait = stable_after - (time.time() - before["ready_at"])
    if wait > 0:
        print(f"(waiting {wait:.0f} s for a stable period, so the crash is an isolated one)", flush=True)
        time.sleep(wait)
    pid = row(url)["pid"]
    with httpx.Client(timeout=600) as client:
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        elapsed, failures = until_success(client, url, killed)
    after = row(url)
    load = after["ready_at"] - after["started_at"]
    print(f"isolated crash (kill -9) -> first success through the endpoint: {elapsed:.2f} s")
    print(f"  the model's load time (spawn -> ready of the new child): {load:.2f} s")
    print(f"  difference: {elapsed - load:+.2f} s (the bound is load time + 2 s)")
    print(f"  failed requests meanwhile: {failures or 'none'}; restarts {after['restarts']}")


def run_fuzz(examples: int, folder: Path) -> None:
    counts = folder / "fuzz_counts.json"
    env = {**os.environ, "ORCHESTRATOR_FUZZ_COUNTS": str(counts), "ORCHESTRATOR_FUZZ_EXAMPLES": str(examples)}
    test = Path(__file__).resolve().parents[1] / "tests" / "serve" / "test_fuzz_routes.py"
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)], env=env)
    took = time.monotonic() - started
    print(f"fuzz: {examples} bodies per POST route, pytest exit {result.returncode}, {took:.0f} s")
    if counts.exists():
        print(f"  answers by status: {counts.read_text().strip()}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None, help="GGUF (default: the tiny demo model)")
    ap.add_argument("--stall", type=float, default=30.0, help="server.timeouts.stall (s)")
    ap.add_argument("--fuzz", action="store_true", help="also run the fuzz test once and print its counts")
    ap.add_argument("--examples", type=int, default=40, help="fuzz bodies per POST route")
    args = ap.parse_args()
    if args.model is None:
        from orchestrator.models.tiny import demo_model

        args.model = demo_model()
    with tempfile.TemporaryDirectory(prefix="measure-recovery-") as tmp:
        folder = Path(tmp)
        config = write_config(folder, args.model.resolve(), args.stall)
        state = folder / "state"
        env = {**os.environ, "ORCHESTRATOR_STATE": str(state)}
        cmd = [sys.executable, "-m", "orchestrator.cli.app", "up", "--config", str(config)]
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent()
        )
        try:
            url = wait_ready(proc, state)
            first = row(url)
            print(f"model: {args.model}; first load {first['ready_at'] - first['started_at']:.2f} s")
            print(f"stall timeout {args.stall:g} s; restart rules: {SupervisorPolicy().restart_rules()}", flush=True)
            measure_freeze(url)
            measure_crash(url, SupervisorPolicy().stable_after)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if args.fuzz:
            run_fuzz(args.examples, folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
