#!/usr/bin/env python3
"""The cost of the body check (``orchestrator/serve/http/shapes.py``) against parsing the body, in one run.

Every request body passes ``json.loads`` and then the check of what it may hold; both run here,
interleaved, on the last recorded request of each real agent session (``tests/data/agent_sessions``:
Claude Code, Codex, opencode) and on a body of 400,000 one-word messages (refused with 413).
Printed: the median microseconds of each and the ratio check / parse.

    python scripts/measure_body_check.py [--rounds 300]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from orchestrator.errors import ApiError
from orchestrator.serve.http import shapes as body_shapes
from orchestrator.serve.registry import adapter_for

SESSIONS = Path(__file__).resolve().parents[1] / "tests" / "data" / "agent_sessions"


def _timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    with contextlib.suppress(ApiError):  # the flood is refused: its time is the refusal's
        run()
    return time.perf_counter() - started


def measure(name: str, route: str, raw: bytes, rounds: int) -> None:
    body = json.loads(raw)
    limits = body_shapes.Limits()
    parse, check = [], []
    for _ in range(rounds):  # interleaved: machine noise hits both
        parse.append(_timed(lambda: json.loads(raw)))
        check.append(_timed(lambda: body_shapes.check(body, raw, getattr(adapter_for(route), "shape", None), limits)))
    p, c = statistics.median(parse) * 1e6, statistics.median(check) * 1e6
    print(f"{name:<24} {len(raw):>10} bytes  json.loads {p:>9.0f} us  check {c:>7.0f} us  check/parse {c / p:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=300)
    args = ap.parse_args()
    for session in sorted(SESSIONS.glob("*.json")):
        recorded = json.loads(session.read_text())
        raw = json.dumps(recorded["requests"][-1]).encode()
        measure(session.stem, recorded["route"], raw, args.rounds)
    flood = {"model": "demo", "messages": [{"role": "user", "content": "word"}] * 400_000}
    measure("400,000 messages", "/v1/chat/completions", json.dumps(flood).encode(), max(3, args.rounds // 100))


if __name__ == "__main__":
    main()
