#!/usr/bin/env python
"""Startup overhead of ``orchestrator up`` over a bare llama-server, measured in one run.

For the same model and the same llama-server command line (taken from the launch plan):

- bare: spawn llama-server, poll its listening port and ``/health`` every 50 ms until 200;
- orchestrator: spawn ``orchestrator up`` (the real CLI, a fresh Python process) and poll its
  ``run.json`` every 50 ms until every instance is ready (after /health ok and the /props
  identity check), which is also when the endpoint starts forwarding.

The two alternate, ``--reps`` times each; medians and their ratio are printed. Seconds.

    python scripts/measure_startup.py [--model PATH] [--reps 3]

The default model is the tiny demo model (``orchestrator.models.tiny.demo_model()``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from orchestrator.config.load import load_config
from orchestrator.host.gpus import detect_gpus
from orchestrator.host.process import die_with_parent, listening_ports
from orchestrator.launch.plan import plan_launch
from orchestrator.native.build import locate
from orchestrator.native.capabilities import probe_capabilities

POLL = 0.05  # seconds


def write_config(folder: Path, model: Path) -> Path:
    path = folder / "models.yaml"
    path.write_text(
        "server: {host: 127.0.0.1, port: 0}\n"
        f"models:\n  - name: demo\n    path: {model}\n    ctx_size: 512\n    threads: 2\n"
    )
    return path


def time_bare(argv: list[str], env: dict[str, str]) -> float:
    """Seconds from spawning llama-server to its first ``/health`` 200."""
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=die_with_parent(),
    )
    try:
        with httpx.Client(trust_env=False, timeout=2) as client:
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"llama-server exited with {proc.returncode}")
                for port in listening_ports(proc.pid):
                    try:
                        if client.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                            return time.monotonic() - started
                    except httpx.HTTPError:
                        pass
                time.sleep(POLL)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def time_up(config: Path, state: Path) -> float:
    """Seconds from spawning ``orchestrator up`` to every instance ready in its run.json."""
    env = {**os.environ, "ORCHESTRATOR_STATE": str(state)}
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli.app", "up", "--config", str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=die_with_parent(),
    )
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"orchestrator up exited with {proc.returncode}")
            try:
                run = json.loads((state / "run.json").read_text())
                insts = run["instances"].values()
                if insts and all(i["state"] in ("ready", "degraded") for i in insts):
                    return time.monotonic() - started
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(POLL)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None, help="GGUF (default: the tiny demo model)")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    if args.model is None:
        from orchestrator.models.tiny import demo_model

        args.model = demo_model()
    with tempfile.TemporaryDirectory(prefix="measure-startup-") as tmp:
        folder = Path(tmp)
        config_path = write_config(folder, args.model.resolve())
        config = load_config(config_path)
        found, _ = detect_gpus()
        build = locate()
        spec = plan_launch(config, gpus=found, build=build, capabilities=probe_capabilities(build), check_ports=False)[
            0
        ]
        bare, up = [], []
        for rep in range(args.reps):
            bare.append(time_bare(list(spec.argv), spec.env))
            up.append(time_up(config_path, folder / f"state{rep}"))
            print(f"rep {rep + 1}: bare llama-server {bare[-1]:.2f} s, orchestrator up {up[-1]:.2f} s", flush=True)
    b, u = statistics.median(bare), statistics.median(up)
    print(f"model: {args.model}")
    print(f"command: {spec.command_line}")
    print(f"bare llama-server launch -> /health ok: {b:.2f} s (median of {args.reps})")
    print(f"orchestrator up start -> ready:         {u:.2f} s (median of {args.reps})")
    print(f"ratio up / bare: {u / b:.2f}x (overhead {u - b:+.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
