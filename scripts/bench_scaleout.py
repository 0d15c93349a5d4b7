#!/usr/bin/env python3
"""Beyond one machine, measured on one: what a loopback RPC worker and a peer cost.

1. Decode tok/s of the tiny model with its layers split across a loopback ``orchestrator worker``
   (``rpc:`` + ``gpu_layers``) next to the same model all local, both served by one
   ``orchestrator up``; requests alternate between the two; decode tok/s is llama-server's
   ``timings.predicted_per_second`` of each response.
2. The latency a peer adds: a second ``orchestrator up`` (B) serves model ``far``; the first (A)
   lists B under ``peers:``. The same small request goes to B directly and through A,
   alternating; the figure is the difference of the medians.

Prints medians and the ratio / difference against the baseline of the same run.

    python scripts/bench_scaleout.py [--runs 10] [--tokens 128] [--latency-runs 40] [--split-layers 2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from orchestrator.host.process import die_with_parent

ORCH = [sys.executable, "-m", "orchestrator.cli.app"]


@contextlib.contextmanager
def worker(tmp: Path) -> Iterator[str]:
    """``orchestrator worker --port 0``; yields its ``host:port``."""
    env = {**os.environ, "ORCHESTRATOR_STATE": str(tmp / "worker-state")}
    proc = subprocess.Popen(
        [*ORCH, "worker", "--port", "0"], env=env, stderr=subprocess.PIPE, text=True, preexec_fn=die_with_parent()
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if found := re.search(r"worker ready: (\S+)", line):
                yield found.group(1)
                return
        raise SystemExit("orchestrator worker exited before it was ready")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


@contextlib.contextmanager
def up(tmp: Path, name: str, yaml: str) -> Iterator[str]:
    """``orchestrator up`` on ``yaml`` until every instance serves; yields its endpoint URL."""
    state = tmp / f"{name}-state"
    config = tmp / f"{name}.yaml"
    config.write_text(yaml)
    env = {**os.environ, "ORCHESTRATOR_STATE": str(state)}
    with open(tmp / f"{name}.out", "wb") as out:
        proc = subprocess.Popen(
            [*ORCH, "up", "-c", str(config)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent(),
        )
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"orchestrator up ({name}) exited:\n{(tmp / f'{name}.out').read_text()}")
            with contextlib.suppress(OSError, ValueError):
                run = json.loads((state / "run.json").read_text())
                if all(i["state"] == "ready" for i in run["instances"].values()):
                    yield str(run["endpoint"])
                    return
            if time.monotonic() > deadline:
                raise SystemExit(f"orchestrator up ({name}) not ready after 300 s")
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)


def _chat(client: httpx.Client, url: str, model: str, tokens: int) -> dict[str, object]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "count"}],
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    resp = client.post(f"{url}/v1/chat/completions", json=body, timeout=300)
    resp.raise_for_status()
    answer: dict[str, object] = resp.json()
    return answer


def decode_split(tmp: Path, runs: int, tokens: int, layers: int) -> None:
    with worker(tmp) as endpoint:
        model = "path: builtin:tiny-mtp, ctx_size: 1024, threads: 1, speculative: {type: none}"
        yaml = (
            "server: {host: 127.0.0.1, port: 0}\nmodels:\n"
            f"  - {{name: local, {model}}}\n"
            f"  - {{name: split, {model}, gpu_layers: {layers}, rpc: ['{endpoint}']}}\n"
        )
        with up(tmp, "split", yaml) as url, httpx.Client(trust_env=False) as client:
            tps: dict[str, list[float]] = {"local": [], "split": []}
            for name in tps:  # warm-up, not counted
                _chat(client, url, name, 8)
            for _ in range(runs):
                for name, found in tps.items():
                    timings = _chat(client, url, name, tokens)["timings"]
                    found.append(float(timings["predicted_per_second"]))  # type: ignore[index]
    local, split = statistics.median(tps["local"]), statistics.median(tps["split"])
    print(f"decode tok/s, tiny model, {tokens} tokens x {runs} runs (median):")
    print(f"  all local                          {local:8.1f}")
    print(f"  {layers} layers on a loopback RPC worker  {split:8.1f}   ratio {split / local:.2f}x of all local")


def peer_latency(tmp: Path, runs: int) -> None:
    model = "path: builtin:tiny-mtp, ctx_size: 512, threads: 1, speculative: {type: none}"
    b_yaml = f"server: {{host: 127.0.0.1, port: 0}}\nmodels:\n  - {{name: far, {model}}}\n"
    with up(tmp, "peer-b", b_yaml) as b_url:
        a_yaml = (
            f"server: {{host: 127.0.0.1, port: 0}}\nmodels:\n  - {{name: near, {model}}}\n"
            f"peers:\n  - {{name: b, url: '{b_url}'}}\n"
        )
        with up(tmp, "peer-a", a_yaml) as a_url, httpx.Client(trust_env=False) as client:
            while "far" not in {m["id"] for m in client.get(f"{a_url}/v1/models").json()["data"]}:
                time.sleep(0.2)  # discovered at A's first check of B
            seconds: dict[str, list[float]] = {"direct": [], "via peer": []}
            for url in (b_url, a_url):
                _chat(client, url, "far", 1)
            for _ in range(runs):
                for label, url in (("direct", b_url), ("via peer", a_url)):
                    started = time.perf_counter()
                    _chat(client, url, "far", 1)
                    seconds[label].append(time.perf_counter() - started)
    direct, via = statistics.median(seconds["direct"]), statistics.median(seconds["via peer"])
    print(f"request latency, 1 token, {runs} runs (median):")
    print(f"  to B directly           {direct * 1000:7.1f} ms")
    print(
        f"  to A, forwarded to B    {via * 1000:7.1f} ms   added {(via - direct) * 1000:.1f} ms ({via / direct:.2f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--latency-runs", type=int, default=40)
    parser.add_argument("--split-layers", type=int, default=2, help="layers on the RPC worker (-ngl)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-scaleout-") as tmp:
        decode_split(Path(tmp), args.runs, args.tokens, args.split_layers)
        peer_latency(Path(tmp), args.latency_runs)


if __name__ == "__main__":
    main()
