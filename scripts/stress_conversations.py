#!/usr/bin/env python3
"""Concurrent agent conversations: does every request get its answer? (``orchestrator.bench.stress``)

Through ``orchestrator up`` on the tiny demo model (the default; one ``up`` per ``--parallel``, each
with its own state and KV folder), or straight to a running llama-server (``--url``, each
conversation pinned to slot ``n % --pin`` as prefix affinity does):

    python scripts/stress_conversations.py [--parallel 1 2 4] [--runs 5] [--requests 120]
    python scripts/stress_conversations.py --url http://127.0.0.1:8081 --pin 2

Prints, per run, how many of the requests were answered within the client timeout, and each one
that was not. Exit status 1 when any request failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_kv_persist import Up  # a sibling script

from orchestrator.bench.stress import Load, run
from orchestrator.models.tiny import demo_model


def write_config(folder: Path, parallel: int, n_max: int) -> Path:
    model = {
        "name": "demo", "path": str(demo_model()), "ctx_size": 3072 * parallel, "threads": 1,
        "parallel": parallel, "load": "on_start", "allow_ctx_beyond_trained": True,
        "speculative": {"type": "draft-mtp", "n_max": n_max, "n_min": 0},
    }  # fmt: skip
    server = {"host": "127.0.0.1", "port": 0, "memory_reserve": 0}
    path = folder / "models.yaml"
    path.write_text(json.dumps({"server": server, "models": [model]}))  # JSON is YAML
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parallel", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--requests", type=int, default=120)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--n-max", type=int, default=3)
    ap.add_argument("--url", help="a running llama-server or endpoint instead of orchestrator up")
    ap.add_argument("--pin", type=int, default=0, help="with --url: pin conversation n to slot n %% PIN")
    ap.add_argument("--model", default="demo")
    args = ap.parse_args()
    failed = 0
    if args.url:
        load = Load(args.model, args.clients, args.requests, timeout=args.timeout, pin_slots=args.pin)
        for k in range(args.runs):
            report = asyncio.run(run(args.url.rstrip("/"), load))
            print(f"run {k + 1}: {report.summary()}", flush=True)
            failed += len(report.failed)
        return 1 if failed else 0
    for parallel in args.parallel:
        with tempfile.TemporaryDirectory(prefix="stress-") as tmp:
            folder = Path(tmp)
            (folder / "state").mkdir()
            up = Up(write_config(folder, parallel, args.n_max), folder / "state", folder / "kv").start()
            try:
                load = Load("demo", args.clients, args.requests, timeout=args.timeout)
                for k in range(args.runs):
                    report = asyncio.run(run(up.url.removesuffix("/v1"), load))
                    print(f"parallel {parallel} run {k + 1}: {report.summary()}", flush=True)
                    failed += len(report.failed)
            finally:
                up.down()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
