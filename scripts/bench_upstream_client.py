#!/usr/bin/env python3
"""Which HTTP client the proxy should use for its hop to llama-server: httpx or aiohttp, measured.

A benchmark, not a test. It starts one llama-server on the tiny demo model and, in rounds with a
rotating order (so drift and other load hit every client alike), has each client make
``--requests`` sequential 1-token requests and ``--streams`` concurrent streams of ``--tokens``
tokens, the way ``orchestrator.serve.upstream.client`` does (keep-alive pool, raw body chunks). It
prints, per client, the median 1-token latency and this process's CPU time (``time.process_time``:
the client's work, llama-server excluded) per request and per streamed chunk.

    python scripts/bench_upstream_client.py [--rounds 10] [--requests 50] [--streams 4] [--tokens 128]
"""

import argparse
import asyncio
import contextlib
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.host.process import die_with_parent  # noqa: E402

PATH = "/v1/chat/completions"


def body(text: str, tokens: int, stream: bool) -> bytes:
    import json

    return json.dumps(
        {
            "model": "demo",
            "max_tokens": tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": stream,
            "messages": [{"role": "user", "content": text}],
        }
    ).encode()


class Httpx:
    name = "httpx"

    def __init__(self, url: str) -> None:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64, keepalive_expiry=30.0)
        self.client = httpx.AsyncClient(base_url=url, limits=limits, timeout=None, trust_env=False)

    async def chunks(self, content: bytes) -> AsyncIterator[bytes]:
        request = self.client.build_request("POST", PATH, content=content, headers={"content-type": "application/json"})
        response = await self.client.send(request, stream=True)
        try:
            async for chunk in response.aiter_raw():
                yield chunk
        finally:
            await response.aclose()

    async def close(self) -> None:
        await self.client.aclose()


class Aiohttp:
    name = "aiohttp"

    def __init__(self, url: str) -> None:
        self.url = url
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30.0)
        self.session = aiohttp.ClientSession(
            base_url=url, connector=connector, timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False
        )

    async def chunks(self, content: bytes) -> AsyncIterator[bytes]:
        async with self.session.post(PATH, data=content, headers={"content-type": "application/json"}) as response:
            async for chunk in response.content.iter_any():
                yield chunk

    async def close(self) -> None:
        await self.session.close()


async def one(client: Any, content: bytes) -> int:
    n = 0
    async for _ in client.chunks(content):
        n += 1
    return n


async def rounds(url: str, args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    clients = [Httpx(url), Aiohttp(url)]
    out: dict[str, dict[str, list[float]]] = {c.name: {"lat": [], "cpu_req": [], "cpu_chunk": []} for c in clients}
    short, long = body("Say hi", 1, False), body("Tell a long story", args.tokens, True)
    for c in clients:  # warm up
        for _ in range(5):
            await one(c, short)
        await one(c, long)
    for r in range(args.rounds):
        order = clients[r % len(clients) :] + clients[: r % len(clients)]
        for c in order:
            lats = []
            cpu0 = time.process_time()
            for _ in range(args.requests):
                t0 = time.perf_counter()
                await one(c, short)
                lats.append(time.perf_counter() - t0)
            out[c.name]["cpu_req"].append((time.process_time() - cpu0) / args.requests)
            out[c.name]["lat"].append(statistics.median(lats))
            cpu0 = time.process_time()
            chunks = sum(await asyncio.gather(*(one(c, long) for _ in range(args.streams))))
            out[c.name]["cpu_chunk"].append((time.process_time() - cpu0) / max(1, chunks))
        print(
            f"round {r + 1}/{args.rounds}: "
            + ", ".join(
                f"{n} {v['lat'][-1] * 1e3:.2f} ms, {v['cpu_req'][-1] * 1e3:.3f} ms CPU/req, "
                f"{v['cpu_chunk'][-1] * 1e6:.0f} us CPU/chunk"
                for n, v in out.items()
            ),
            flush=True,
        )
    for c in clients:
        await c.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--requests", type=int, default=50)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128)
    args = ap.parse_args()
    from orchestrator.models.tiny import demo_model
    from orchestrator.native.build import locate

    build = locate()
    with socket.socket() as sock:  # a free port for llama-server
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = [str(build.server), "-m", str(demo_model()), "-c", "4096", "-np", "4", "-t", "1"]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={"LD_LIBRARY_PATH": str(build.lib_dir)},
        preexec_fn=die_with_parent(),
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health").status_code == 200:
                    break
            assert time.monotonic() < deadline and proc.poll() is None, "llama-server did not load"
            time.sleep(0.2)
        out = asyncio.run(rounds(url, args))
    finally:
        proc.terminate()
        proc.wait(15)
    print("\n| client | 1-token p50 ms | CPU ms / request | CPU us / streamed chunk |\n|---|---|---|---|")
    for name, v in out.items():
        print(
            f"| {name} | {statistics.median(v['lat']) * 1e3:.2f} | {statistics.median(v['cpu_req']) * 1e3:.3f} | "
            f"{statistics.median(v['cpu_chunk']) * 1e6:.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
