#!/usr/bin/env python
"""How long an API key removed from models.yaml still answers, through a real ``orchestrator up``.

``up`` serves the demo model with ``server.api_keys: [old, keep]``. The file is then rewritten
without ``old`` and ``GET /v1/models`` is sent with ``old`` every 10 ms until it gets 401; the
seconds from the write (or from ``POST /reload``) to that 401 are printed. Modes:

- ``file``: the file watcher notices the edit;
- ``post``: ``POST /reload`` right after the edit;
- ``restart``: the same edit also changes ``ctx_size`` (the model drains and restarts) while a
  long stream keeps the model busy.

    python scripts/measure_key_removal.py [--mode file|post|restart] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from orchestrator.host.process import die_with_parent


def write_config(path: Path, port: int, keys: list[str], ctx: int = 2048) -> None:
    path.write_text(
        f"server:\n  host: 127.0.0.1\n  port: {port}\n  api_keys: {json.dumps(keys)}\n  timeouts: {{drain: 30}}\n"
        f"models:\n  - name: demo\n    path: builtin:tiny-mtp\n    ctx_size: {ctx}\n    threads: 1\n"
        "    thinking: false\n"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 300
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"orchestrator up exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("orchestrator up did not get ready in 300 s")
        time.sleep(0.2)


def busy_stream(url: str) -> None:
    """A long stream with the kept key: the restart has a replica to drain."""
    body = {"model": "demo", "prompt": "x", "max_tokens": 3000, "stream": True, "ignore_eos": True}
    try:
        headers = {"Authorization": "Bearer keep"}
        with httpx.stream("POST", url + "/v1/completions", json=body, headers=headers, timeout=120) as r:
            for _ in r.iter_bytes():
                pass
    except httpx.HTTPError:
        pass


def one_run(folder: Path, mode: str) -> float:
    """Seconds from the edit to the first 401 for the removed key."""
    port = free_port()
    config = folder / "models.yaml"
    write_config(config, port, ["old", "keep"])
    env = {**os.environ, "ORCHESTRATOR_STATE": str(folder / "state")}
    with open(folder / "up.out", "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli.app", "up", "--config", str(config)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent(),
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc)
        with httpx.Client(base_url=url, timeout=30, trust_env=False) as client:
            old = {"Authorization": "Bearer old"}
            assert client.get("/v1/models", headers=old).status_code == 200
            if mode == "restart":
                threading.Thread(target=busy_stream, args=(url,), daemon=True).start()
                time.sleep(2)
            write_config(config, port, ["keep"], ctx=1024 if mode == "restart" else 2048)
            started = time.monotonic()
            if mode == "post":
                keep = {"Authorization": "Bearer keep"}
                threading.Thread(target=lambda: client.post("/reload", headers=keep), daemon=True).start()
            while client.get("/v1/models", headers=old).status_code != 401:
                if time.monotonic() - started > 120:
                    raise SystemExit("the removed key still answered after 120 s")
                time.sleep(0.01)
            return time.monotonic() - started
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("file", "post", "restart"), default="file")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    took = []
    for rep in range(args.reps):
        with tempfile.TemporaryDirectory(prefix="measure-keys-") as tmp:
            took.append(one_run(Path(tmp), args.mode))
        print(f"rep {rep + 1}: the removed key was refused {took[-1]:.2f} s after the edit", flush=True)
    print(f"{args.mode}: median {statistics.median(took):.2f} s, max {max(took):.2f} s over {args.reps} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
