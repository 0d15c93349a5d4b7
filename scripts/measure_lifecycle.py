#!/usr/bin/env python
"""The model lifecycle's figures, measured in one run against a real ``orchestrator up``.

1. Cold start on demand: for the same model and llama-server command line, alternately
   - bare: spawn llama-server and poll ``/health`` every 50 ms until 200 (``measure_startup.time_bare``);
   - on demand: the model is unloaded; a streamed chat request is sent to ``orchestrator up`` and
     the time to its first token (first ``data:`` event with content) is taken; then
     ``POST /models/unload``.
2. Swaps: with a ``memory_budget`` that holds one model, 8 concurrent requests alternating between
   two models (both unloaded at first); the swap count (``orchestrator_model_swaps_total``) and
   the total time.

Seconds. ``python scripts/measure_lifecycle.py [--reps 5]`` (tiny generated models by default).
"""

from __future__ import annotations

import argparse
import asyncio
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
from measure_startup import time_bare

from orchestrator.config.load import load_config
from orchestrator.launch.plan import plan_launch
from orchestrator.native.build import locate
from orchestrator.native.capabilities import probe_capabilities

POLL = 0.05


def write_config(folder: Path, models: list[Path], budget: int) -> Path:
    path = folder / "models.yaml"
    lines = [
        "server:",
        "  host: 127.0.0.1",
        "  port: 0",
        "  memory_reserve: 0",
        f"  memory_budget: {{cpu: {budget}}}",
        "models:",
    ]
    for i, model in enumerate(models):
        lines.append(f"  - {{name: m{i}, path: {model}, ctx_size: 512, threads: 2, load: on_demand}}")
    path.write_text("\n".join(lines) + "\n")
    return path


def start_up(config: Path, state: Path) -> tuple[subprocess.Popen[bytes], str]:
    env = {**os.environ, "ORCHESTRATOR_STATE": str(state)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli.app", "up", "--config", str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"orchestrator up exited with {proc.returncode}")
        try:
            endpoint = json.loads((state / "run.json").read_text())["endpoint"]
            if httpx.get(f"{endpoint}/health", timeout=2, trust_env=False).status_code == 200:
                return proc, endpoint
        except (OSError, ValueError, KeyError, httpx.HTTPError):
            pass
        time.sleep(POLL)
    raise SystemExit("orchestrator up did not become healthy within 120 s")


def time_cold_first_token(endpoint: str, model: str) -> float:
    """Seconds from sending a streamed request for an unloaded ``model`` to its first content token."""
    body = {"model": model, "stream": True, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    started = time.monotonic()
    with httpx.stream("POST", f"{endpoint}/v1/chat/completions", json=body, timeout=300, trust_env=False) as r:
        lines = r.iter_lines()
        for line in lines:
            if line.startswith("data: {") and '"content"' in line:
                elapsed = time.monotonic() - started
                break
        else:
            raise SystemExit("the stream ended without a token")
        for _ in lines:  # read the stream to its end
            pass
    httpx.post(f"{endpoint}/models/unload", json={"model": model}, timeout=120, trust_env=False).raise_for_status()
    return elapsed


async def alternating(endpoint: str, n: int = 8) -> float:
    async with httpx.AsyncClient(timeout=300, trust_env=False) as client:
        started = time.monotonic()
        bodies = [
            {"model": f"m{i % 2}", "max_tokens": 8, "messages": [{"role": "user", "content": f"request {i}"}]}
            for i in range(n)
        ]
        answers = await asyncio.gather(*(client.post(f"{endpoint}/v1/chat/completions", json=b) for b in bodies))
        elapsed = time.monotonic() - started
    bad = [a.status_code for a in answers if a.status_code != 200]
    if bad:
        raise SystemExit(f"alternating requests failed: {bad}")
    return elapsed


def swaps(endpoint: str) -> float:
    text = httpx.get(f"{endpoint}/metrics", timeout=10, trust_env=False).text
    line = next(ln for ln in text.splitlines() if ln.startswith("orchestrator_model_swaps_total"))
    return float(line.split()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    from orchestrator.models.tiny import write_tiny_model

    with tempfile.TemporaryDirectory(prefix="measure-lifecycle-") as tmp:
        folder = Path(tmp)
        models = [write_tiny_model(folder / f"tiny-{s}.gguf", seed=s) for s in (1, 2)]
        build = locate()
        probe = load_config(write_config(folder, models, 1 << 40))
        specs = plan_launch(probe, gpus=[], build=build, capabilities=probe_capabilities(build), check_ports=False)
        need = specs[0].memory or 0
        config = write_config(folder, models, int(need * 1.5))  # room for one model
        proc, endpoint = start_up(config, folder / "state")
        try:
            bare, cold = [], []
            for rep in range(args.reps):
                bare.append(time_bare(list(specs[0].argv), specs[0].env))
                cold.append(time_cold_first_token(endpoint, "m0"))
                print(f"rep {rep + 1}: bare launch -> /health {bare[-1]:.2f} s, "
                      f"request -> first token (cold) {cold[-1]:.2f} s", flush=True)  # fmt: skip
            before = swaps(endpoint)
            total = asyncio.run(alternating(endpoint))
            swapped = swaps(endpoint) - before
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    b, c = statistics.median(bare), statistics.median(cold)
    print(f"command: {specs[0].command_line}")
    print(f"bare llama-server launch -> /health ok:      {b:.2f} s (median of {args.reps})")
    print(f"request for an unloaded model -> 1st token:  {c:.2f} s (median of {args.reps})")
    print(f"ratio: {c / b:.2f}x (overhead {c - b:+.2f} s)")
    print(f"8 concurrent alternating requests, room for one model: {swapped:.0f} swap(s), {total:.2f} s in total")
    return 0


if __name__ == "__main__":
    sys.exit(main())
