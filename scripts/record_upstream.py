#!/usr/bin/env python3
"""Record what the pinned llama-server answers on each API's route, whole and streamed, for the
call-level tests (``tests/serve/adapters/test_calls_recorded.py``).

    python scripts/record_upstream.py [--out tests/data/upstream_recorded.json]

For each case (an API's client body, whole and streamed) the API's adapter opens the call and
prepares it for the demo model, exactly as the endpoint does; the prepared body goes to a
llama-server of ``orchestrator build`` serving the demo model (``orchestrator.models.tiny``,
greedy, so the answers are the same on every machine), and the answer's bytes are kept as they
came: a whole answer's body, or a stream's chunks in the order and cut they arrived in. Run it
again after a pin bump or a change to what a route sends.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from orchestrator.config.schema import ModelConfig
from orchestrator.host.ports import pick_free_port
from orchestrator.host.process import die_with_parent
from orchestrator.models.tiny import demo_model
from orchestrator.native import build
from orchestrator.serve.cache.prefix import policy_for
from orchestrator.serve.registry import adapter_for

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / "upstream_recorded.json"
MODEL = ModelConfig(name="demo", path="/unused.gguf", thinking=False)  # the answers as text, not reasoning
USER = [{"role": "user", "content": "Say hello to the world"}]
# (name, the client's path, its body without ``stream``); each is recorded whole and streamed
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("chat", "/v1/chat/completions", {"model": "demo", "max_tokens": 12, "messages": USER}),
    ("completions", "/v1/completions", {"model": "demo", "max_tokens": 12, "prompt": "Say hello to the world"}),
    ("messages", "/v1/messages", {"model": "demo", "max_tokens": 12, "system": "Be brief.", "messages": USER}),
    ("responses", "/v1/responses", {"model": "demo", "max_output_tokens": 12, "input": "Say hello to the world"}),
    ("ollama_chat", "/api/chat", {"model": "demo", "messages": USER, "options": {"num_predict": 12}}),
]


def _serve(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    info = build.locate()
    port = pick_free_port("127.0.0.1")
    env = {**os.environ, "LD_LIBRARY_PATH": str(info.lib_dir)}
    argv = [str(info.server), "-m", str(demo_model()), "--port", str(port), "-c", "2048", "-np", "1", "-t", "2"]
    argv += ["--alias", "demo", "--jinja", "--spec-type", "draft-mtp", "--spec-draft-n-max", "2"]
    proc = subprocess.Popen(
        argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent()
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2, trust_env=False).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("llama-server did not start:\n" + log.read_text()[-3000:])


def record(client: httpx.Client, url: str, name: str, path: str, body: dict[str, Any], stream: bool) -> dict[str, Any]:
    """One case: the prepared body sent, and the answer's bytes as they came."""
    body = {**body, "stream": stream}
    adapter = adapter_for(path)
    assert adapter is not None, path
    call = adapter.open(body, json.dumps(body).encode())
    plan = call.prepare(MODEL, policy_for(MODEL))
    sent = plan.current(call.body)
    with client.stream("POST", url + call.internal.path, json=sent) as response:
        chunks = [chunk.decode() for chunk in response.iter_raw()]
    case = {"name": name, "path": path, "body": body, "upstream_path": call.internal.path, "sent": sent}
    return {**case, "status": response.status_code, "stream": stream, "chunks": chunks}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = _serve(Path(tmp) / "llama-server.log")
        try:
            with httpx.Client(timeout=120, trust_env=False) as client:
                cases = [record(client, url, n, p, b, s) for n, p, b in CASES for s in (False, True)]
        finally:
            proc.terminate()
            proc.wait(30)
    bad = [f"{c['name']} stream={c['stream']}: {c['status']}" for c in cases if c["status"] != 200]
    if bad:
        raise SystemExit("llama-server refused: " + "; ".join(bad))
    args.out.write_text(json.dumps({"model": "demo (orchestrator.models.tiny)", "cases": cases}, indent=1) + "\n")
    print(f"{len(cases)} cases -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
