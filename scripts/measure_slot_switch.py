#!/usr/bin/env python3
"""What switching one slot between two conversations costs, straight to llama-server.

Two conversations share a system prompt (``--system`` tokens) and each has its own history
(``--history`` tokens); they alternate on one slot (``-np 1``), each turn adding ``--new`` tokens
and generating one. Per turn: the wall time of the request, the prompt tokens processed
(``prompt_n``) and its ``prompt_ms``; then the same for turns of one conversation alone (no switch).
With native patch 0008 a switch saves the slot in llama-server's host-memory prompt cache and
loads the other conversation from it (wall time above ``prompt_ms``: the copies); without it the
other conversation's history is processed again. Use a model with real shapes for real copy sizes:

    orchestrator make-tiny-model /tmp/medium.gguf --shape qwen3.6-35b-a3b --scale medium
    python scripts/measure_slot_switch.py /tmp/medium.gguf [--bin-dir BUILD/bin] [--system 1500 --history 1000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from orchestrator.native.build import locate
from orchestrator.supervise.readiness import parse_listening_port


def start(server: Path, model: Path, ctx: int) -> tuple[subprocess.Popen[str], str]:
    argv = [str(server), "-m", str(model), "--host", "127.0.0.1", "--port", "0", "-np", "1", "-c", str(ctx), "-t", "2"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        if (port := parse_listening_port(line)) is not None:
            url = f"http://127.0.0.1:{port}"
            break
    else:
        raise SystemExit("llama-server exited before listening")
    while httpx.get(url + "/health", timeout=60).status_code != 200:
        time.sleep(0.5)
    return proc, url


def run(url: str, prompt: list[int]) -> tuple[float, int, float]:
    """``(wall s, prompt_n, prompt_ms)`` of one completion of ``prompt`` (one token generated)."""
    started = time.perf_counter()
    r = httpx.post(url + "/completion", json={"prompt": prompt, "n_predict": 1, "cache_prompt": True}, timeout=3600)
    r.raise_for_status()
    t: dict[str, Any] = r.json()["timings"]
    return time.perf_counter() - started, int(t["prompt_n"]), float(t["prompt_ms"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path)
    ap.add_argument("--bin-dir", type=Path, help="a build's bin/ (default: the current build)")
    ap.add_argument("--system", type=int, default=1500)
    ap.add_argument("--history", type=int, default=1000)
    ap.add_argument("--new", type=int, default=20)
    ap.add_argument("--turns", type=int, default=3)
    args = ap.parse_args()
    server = args.bin_dir / "llama-server" if args.bin_dir else locate().server
    proc, url = start(server, args.model, args.system + args.history + 2 * args.turns * args.new + 512)
    try:
        system = [1000 + i % 5000 for i in range(args.system)]
        convs = {c: system + [20000 + 7 * n + c for n in range(args.history)] for c in (0, 1)}
        for c in convs:
            wall, n, ms = run(url, convs[c])
            print(f"conversation {c} first turn: {n} tokens processed in {ms:.0f} ms (wall {wall * 1000:.0f} ms)")
        rows = []
        for turn in range(args.turns):
            for c in convs:
                convs[c] = convs[c] + [30000 + 11 * turn + c] * args.new
                rows.append(("switch", c, *run(url, convs[c])))
        for turn in range(args.turns):
            convs[1] = convs[1] + [31000 + turn] * args.new
            rows.append(("same", 1, *run(url, convs[1])))
        for kind, c, wall, n, ms in rows:
            extra = wall * 1000 - ms
            print(f"{kind:6s} conv {c}: processed {n:5d} in {ms:7.0f} ms; wall {wall * 1000:7.0f} ms (+{extra:.0f} ms)")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
