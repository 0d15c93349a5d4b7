#!/usr/bin/env python3
"""What the proxy costs: our endpoint against direct llama-server, its router mode and a bare proxy.

A benchmark, not a test. In one run on the tiny demo model (``builtin:tiny-mtp``) it starts:

- ``orchestrator up`` (our endpoint: repair, metrics, routing, streaming), whose llama-server
  child is also the *direct* target and the upstream of the bare proxy, so those three hit the
  very same server process;
- llama-server's own *router mode* from the same build (``--models-preset`` with one model, the
  same flags), which forwards to a child llama-server it spawns;
- a *bare* FastAPI + httpx pass-through (:func:`bare_app`, about 40 lines, below).

Then, round by round and in a rotating order (so drift and other load hit every target alike),
for each API route in ``--routes`` (``chat`` = ``/v1/chat/completions``, ``messages`` =
Anthropic ``/v1/messages``, ``responses`` = ``/v1/responses``):

- latency: ``--requests`` sequential non-streamed requests with at most 1 token;
- streaming: one stream, then ``--streams`` concurrent streams, of ``--tokens`` tokens each
  (``ignore_eos``), tok/s = tokens / wall time from request to the stream's last event.

With ``--console SECONDS`` a fifth target, ``orch+console``, is our endpoint again, measured
while a web console polls it the way the page does (:class:`ConsolePoller`: ``/ui/api/live``,
``/v1/models`` and a log follow every SECONDS); its row against ``orchestrator``'s in the same
rounds is the console's cost on the proxy path.

It prints one table per route: added p50/p99 latency versus direct (ms; p50 is the median of the
per-round differences of medians, p99 is over all samples), the median over rounds of the
streamed tok/s ratio versus direct in the same round (1 stream and ``--streams``), and each proxy
process's own CPU time per streamed token (user + system from ``/proc/PID/stat`` around the
streaming phases, children excluded: for router mode that is the router process, not the
llama-server child it forwards to). Client, proxies and servers share the
machine's cores, so the absolute numbers depend on it; the ratios are the point.

    python scripts/bench_proxy.py [--rounds 15] [--requests 30] [--tokens 128] [--streams 4]
                                  [--routes chat,messages,responses] [--console 2] [--json out.json]

Run it at a higher priority than the machine's other work (``nice -n -5``) with enough rounds: the
figures are medians over rounds, so load that comes and goes hits every target alike.
"""

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.host.process import die_with_parent  # noqa: E402

PARALLEL = 8
# route -> (path, the event only a completed stream carries)
ROUTES = {
    "chat": ("/v1/chat/completions", b"data: [DONE]\n\n"),
    "messages": ("/v1/messages", b"event: message_stop"),
    "responses": ("/v1/responses", b"event: response.completed"),
}
CTX = 8192
# llama-server compute threads. One leaves a core to the client and the proxies; two threads on a
# shared 2-core box spin at ggml's barrier whenever either is descheduled, which makes every
# target's timing swing by 10x and hides the proxies' cost.
THREADS = 1


# ----------------------------------------------------------------------------- the bare proxy


def bare_app(upstream: str) -> Any:
    """A minimal FastAPI + httpx pass-through: the yardstick for 'just forwarding'."""
    from fastapi import FastAPI, Request
    from fastapi.responses import Response, StreamingResponse
    from starlette.background import BackgroundTask

    app = FastAPI()
    client = httpx.AsyncClient(base_url=upstream, timeout=None)

    @app.post("/{path:path}")
    async def chat(request: Request, path: str) -> Response:
        body = await request.body()
        req = client.build_request("POST", "/" + path, content=body, headers={"content-type": "application/json"})
        resp = await client.send(req, stream=True)
        if json.loads(body).get("stream"):
            return StreamingResponse(
                resp.aiter_raw(),
                status_code=resp.status_code,
                media_type="text/event-stream",
                background=BackgroundTask(resp.aclose),
            )
        data = await resp.aread()
        await resp.aclose()
        return Response(data, status_code=resp.status_code, media_type="application/json")

    return app


def serve_bare(upstream: str) -> None:
    """Child-process entry: serve :func:`bare_app` on an OS-picked port, print ``PORT n``."""
    import socket

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP_NODELAY on accept
    sock.bind(("127.0.0.1", 0))
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    server = uvicorn.Server(uvicorn.Config(bare_app(upstream), log_level="warning"))
    server.run(sockets=[sock])


# ----------------------------------------------------------------------------- processes


class Child:
    """A child process in its own session, its output kept in a tail; killed with its group."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            preexec_fn=die_with_parent(),  # a kill -9 of this script takes the child along
        )
        self.lines: deque[str] = deque(maxlen=200)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())

    def wait_line(self, predicate: Any, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if predicate(line):
                    return line
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("child did not report in time; last output:\n" + "\n".join(list(self.lines)[-20:]))

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


def wait_http(url: str, timeout: float, ok: int = 200) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == ok:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{url} not answering {ok} after {timeout:g} s")


# `orchestrator up` as shipped (it runs uvloop and sets TCP_NODELAY itself: serve/run.py)
UP = "import sys; from orchestrator.cli.app import app; sys.argv[0] = 'orchestrator'; app()"


UP_PID: dict[str, int] = {}  # our endpoint's URL -> the `orchestrator up` process serving it
PIDS: dict[str, int] = {}  # target URL -> the process that proxies it (its CPU is read from /proc)


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` itself (children excluded), from ``/proc/PID/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def targets(work: Path) -> Iterator[dict[str, str]]:
    """Start everything; yield {target name: base URL}."""
    from orchestrator.models.tiny import demo_model
    from orchestrator.native.build import locate
    from orchestrator.supervise.readiness import parse_listening_port

    model = demo_model()
    children: list[Child] = []
    try:
        state = work / "state"
        yaml = work / "models.yaml"
        yaml.write_text(
            "server:\n  port: 0\nmodels:\n"
            f"  - name: demo\n    path: {model}\n    parallel: {PARALLEL}\n    ctx_size: {CTX}\n"
            f"    threads: {THREADS}\n"
        )
        up = Child(
            [sys.executable, "-c", UP, "up", "-c", str(yaml)],
            env={"ORCHESTRATOR_STATE": str(state)},
        )
        children.append(up)
        run_json = state / "run.json"
        deadline = time.monotonic() + 120
        while True:
            run = json.loads(run_json.read_text()) if run_json.is_file() else {}
            inst = next(iter(run.get("instances", {}).values()), {})
            if run.get("endpoint") and inst.get("state") == "ready" and inst.get("base_url"):
                break
            if up.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("orchestrator up did not get ready:\n" + "\n".join(list(up.lines)[-30:]))
            time.sleep(0.2)
        ours, direct = run["endpoint"], inst["base_url"]
        UP_PID[ours] = int(run["pid"])
        wait_http(ours + "/health", 60)
        bare = Child([sys.executable, __file__, "--serve-bare", direct])
        children.append(bare)
        bare_url = "http://127.0.0.1:" + bare.wait_line(lambda s: s.startswith("PORT "), 30).split()[1]

        build = locate()
        preset = work / "preset.ini"
        preset.write_text(
            "version = 1\n\n[demo]\n"
            f"model = {model}\nc = {CTX}\nnp = {PARALLEL}\nt = {THREADS}\nspec-type = draft-mtp\n"
            "spec-draft-n-max = 3\nspec-draft-n-min = 1\nmetrics = true\nload-on-startup = true\n"
        )
        router = Child(
            [
                str(build.server),
                "--models-preset",
                str(preset),
                "--models-max",
                "1",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
            ],
            env={"LD_LIBRARY_PATH": str(build.lib_dir)},
        )
        children.append(router)
        line = router.wait_line(lambda s: parse_listening_port(s) is not None, 60)
        router_url = f"http://127.0.0.1:{parse_listening_port(line)}"
        deadline = time.monotonic() + 120
        while True:  # the router loads the model in a child; wait until it answers a chat request
            with contextlib.suppress(httpx.HTTPError):
                r = httpx.post(
                    router_url + "/v1/chat/completions",
                    timeout=30,
                    json={"model": "demo", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]},
                )
                if r.status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("router mode did not serve:\n" + "\n".join(list(router.lines)[-30:]))
            time.sleep(0.5)
        PIDS.update({ours: int(run["pid"]), router_url: router.proc.pid, bare_url: bare.proc.pid})
        yield {"direct": direct, "orchestrator": ours, "router": router_url, "bare": bare_url}
    finally:
        for child in reversed(children):
            child.stop()


# ----------------------------------------------------------------------------- the load


class ConsolePoller:
    """What an open console asks every ``interval`` seconds, from a process of its own (a browser is
    one; a thread here would compete with the load generator for its interpreter lock).

    The child keeps one schedule for the whole run and polls only on the ticks that fall while
    :meth:`polling` is active, so the target measured with it sees the page's rate, and the page's
    state (chart sequence, log offset) carries over like a page that stays open.
    """

    def __init__(self, url: str, interval: float) -> None:
        self.interval = interval
        self.polls = 0
        self._child = subprocess.Popen(
            [sys.executable, __file__, "--poll-console", url, "--console", str(interval)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=die_with_parent(),
        )

    def _say(self, word: str) -> None:
        assert self._child.stdin is not None
        self._child.stdin.write(word + "\n")
        self._child.stdin.flush()

    @contextlib.contextmanager
    def polling(self) -> Iterator[None]:
        self._say("on")
        try:
            yield
        finally:
            self._say("off")

    def close(self) -> None:
        self._say("quit")
        out, _ = self._child.communicate(timeout=60)
        self.polls = int(out.split()[-1])


def poll_console(url: str, interval: float) -> None:
    """Child-process entry of :class:`ConsolePoller`: reads on/off/quit lines, prints the poll count."""
    active, done = threading.Event(), threading.Event()

    def commands() -> None:
        for line in sys.stdin:
            {"on": active.set, "off": active.clear, "quit": done.set}[line.strip()]()
        done.set()

    threading.Thread(target=commands, daemon=True).start()
    since, offset, polls = 0, None, 0
    with httpx.Client(base_url=url, timeout=30) as client:
        while not done.wait(interval):
            if not active.is_set():
                continue
            since = client.get("/ui/api/live", params={"since": since}).json()["seq"]
            client.get("/v1/models").raise_for_status()
            q = {} if offset is None else {"offset": offset}
            offset = client.get("/ui/api/logs/demo-0", params=q).json()["offset"]
            polls += 1
    print(f"POLLS {polls}", flush=True)


class Target:
    """One endpoint and its keep-alive client. Resends once when a pooled connection dies
    unanswered (closed or reset before any response byte; counted in ``resends``), like any
    careful client."""

    def __init__(self, name: str, url: str, console: float = 0.0) -> None:
        self.name = name
        self.console = ConsolePoller(url, console) if console else None
        self.client = httpx.AsyncClient(
            base_url=url, timeout=120, limits=httpx.Limits(max_connections=64, max_keepalive_connections=64)
        )
        self.resends = 0
        self.latencies: dict[str, list[list[float]]] = {r: [] for r in ROUTES}  # per route, per round, seconds
        self.tps1: dict[str, list[float]] = {r: [] for r in ROUTES}
        self.tpsn: dict[str, list[float]] = {r: [] for r in ROUTES}
        self.pid = PIDS.get(url)  # the proxy process (None: llama-server itself answers)
        self.cpu_s: dict[str, float] = dict.fromkeys(ROUTES, 0.0)  # its CPU while streaming, per route
        self.streamed: dict[str, int] = dict.fromkeys(ROUTES, 0)  # tokens streamed meanwhile

    async def post(self, body: dict[str, Any], route: str = "chat") -> httpx.Response:
        for attempt in (0, 1):
            try:
                req = self.client.build_request("POST", ROUTES[route][0], json=body)
                return await self.client.send(req, stream=True)
            except (httpx.RemoteProtocolError, httpx.ReadError) as exc:  # a pooled connection died unanswered
                if attempt:
                    raise RuntimeError(f"{self.name} {route}: {exc!r} twice") from exc
                self.resends += 1
        raise AssertionError("unreachable")

    def measuring(self) -> contextlib.AbstractContextManager[None]:
        """While measuring this target: its console polls, if it has one."""
        return self.console.polling() if self.console else contextlib.nullcontext()

    async def one_token(self, route: str = "chat") -> float:
        body = request_body(route, "Say hi", 1)
        t0 = time.perf_counter()
        resp = await self.post(body, route)
        await resp.aread()
        await resp.aclose()
        dt = time.perf_counter() - t0
        if resp.status_code != 200:
            raise RuntimeError(f"{self.name}: HTTP {resp.status_code}: {resp.text[:200]}")
        return dt

    async def stream(self, tokens: int, k: int, route: str = "chat") -> float:
        body = {
            **request_body(route, f"Tell a long story number {k}", tokens),
            "ignore_eos": True,
            "stream": True,
            "chat_template_kwargs": {"enable_thinking": False},
        }
        resp = await self.post(body, route)
        tail, ok, end = b"", False, ROUTES[route][1]
        async for chunk in resp.aiter_raw():
            tail = (tail + chunk)[-64:]
            ok = ok or end in tail or end in chunk
        await resp.aclose()
        if resp.status_code != 200 or not ok:
            raise RuntimeError(f"{self.name}: {route} stream failed (HTTP {resp.status_code}, tail {tail!r})")
        return float(tokens)

    async def streams(self, n: int, tokens: int, route: str = "chat") -> float:
        cpu0 = proc_cpu(self.pid) if self.pid else 0.0
        t0 = time.perf_counter()
        done = await asyncio.gather(*(self.stream(tokens, k, route) for k in range(n)))
        wall = time.perf_counter() - t0
        if self.pid:
            self.cpu_s[route] += proc_cpu(self.pid) - cpu0
        self.streamed[route] += int(sum(done))
        return sum(done) / wall


def request_body(route: str, text: str, tokens: int) -> dict[str, Any]:
    """A request of at most ``tokens`` tokens in ``route``'s API."""
    if route == "responses":
        return {"model": "demo", "input": text, "max_output_tokens": tokens, "temperature": 0}
    return {"model": "demo", "max_tokens": tokens, "temperature": 0, "messages": [{"role": "user", "content": text}]}


async def run_rounds(
    urls: dict[str, str],
    rounds: int,
    requests: int,
    tokens: int,
    streams: int,
    routes: list[str],
    console: float = 0.0,
) -> list[Target]:
    ts = [Target(name, url) for name, url in urls.items()]
    if console:
        ts.append(Target("orch+console", urls["orchestrator"], console))
    for t in ts:  # warm up connections, caches and the router's child
        for route in routes:
            for _ in range(5):
                await t.one_token(route)
            await t.streams(1, 16, route)
        t.cpu_s, t.streamed = dict.fromkeys(ROUTES, 0.0), dict.fromkeys(ROUTES, 0)  # measured rounds only
    for r in range(rounds):
        order = ts[r % len(ts) :] + ts[: r % len(ts)]
        for route in routes:
            for t in order:
                with t.measuring():
                    t.latencies[route].append([await t.one_token(route) for _ in range(requests)])
            for t in order:
                with t.measuring():
                    t.tps1[route].append(await t.streams(1, tokens, route))
            for t in order:
                with t.measuring():
                    t.tpsn[route].append(await t.streams(streams, tokens, route))
            print(
                f"round {r + 1}/{rounds} {route}: "
                + ", ".join(
                    f"{t.name} p50 {statistics.median(t.latencies[route][-1]) * 1e3:.2f} ms, "
                    f"{t.tps1[route][-1]:.0f}/{t.tpsn[route][-1]:.0f} tok/s"
                    for t in ts
                ),
                flush=True,
            )
    for t in ts:
        await t.client.aclose()
        if t.console:
            t.console.close()
    return ts


def quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def report(ts: list[Target], streams: int, route: str) -> dict[str, Any]:
    direct = next(t for t in ts if t.name == "direct")
    rows = {}
    d_all = [x for lat in direct.latencies[route] for x in lat]
    for t in ts:
        lats, tps1, tpsn = t.latencies[route], t.tps1[route], t.tpsn[route]
        t_all = [x for lat in lats for x in lat]
        pairs = zip(lats, direct.latencies[route], strict=True)
        per_round = [statistics.median(a) - statistics.median(b) for a, b in pairs]
        rows[t.name] = {
            "p50_ms": statistics.median(t_all) * 1e3,
            "p99_ms": quantile(t_all, 0.99) * 1e3,
            "added_p50_ms": statistics.median(per_round) * 1e3,
            "added_p99_ms": (quantile(t_all, 0.99) - quantile(d_all, 0.99)) * 1e3,
            "tps_1": statistics.median(tps1),
            "tps_n": statistics.median(tpsn),
            "ratio_1": statistics.median(a / b for a, b in zip(tps1, direct.tps1[route], strict=True)),
            "ratio_n": statistics.median(a / b for a, b in zip(tpsn, direct.tpsn[route], strict=True)),
            "resends": t.resends,
            # the proxy process's own CPU (/proc) over every streamed token of this route
            "cpu_ms_per_token": t.cpu_s[route] / t.streamed[route] * 1e3 if t.pid and t.streamed[route] else None,
        }
    head = (
        f"| {ROUTES[route][0]} | p50 ms | added p50 ms | added p99 ms | tok/s 1 stream | vs direct | "
        f"tok/s {streams} streams | vs direct | proxy CPU ms/token | client resends |"
    )
    print("\n" + head)
    print("|" + "---|" * 10)
    for name, r in rows.items():
        cpu = "-" if r["cpu_ms_per_token"] is None else f"{r['cpu_ms_per_token']:.3f}"
        print(
            f"| {name} | {r['p50_ms']:.2f} | {r['added_p50_ms']:+.2f} | {r['added_p99_ms']:+.2f} | "
            f"{r['tps_1']:.0f} | {r['ratio_1']:.3f}x | {r['tps_n']:.0f} | {r['ratio_n']:.3f}x | {cpu} | "
            f"{r['resends']} |"
        )
    cost = console_cost(ts, route)
    if cost is not None:
        rows["console_cost"] = cost
        print(
            f"\nconsole polling every {cost['interval_s']:g} s ({cost['polls']} polls in all routes) vs none, "
            f"same rounds: added p50 {cost['added_p50_ms']:+.2f} ms, tok/s 1 stream {cost['ratio_1']:.3f}x, "
            f"{streams} streams {cost['ratio_n']:.3f}x"
        )
    return rows


def poll_cpu(url: str, interval: float, polls: int = 200) -> dict[str, float]:
    """CPU time (ms) the orchestrator process spends on one console poll, with nothing else running.

    The same three calls as :func:`poll_console`, back to back; the process's own user + system
    time (children excluded) before and after, per poll.
    """
    import psutil

    proc = psutil.Process(UP_PID[url])
    since, offset = 0, None
    with httpx.Client(base_url=url, timeout=30) as client:
        client.get("/ui/api/live").raise_for_status()  # the first poll of a page fetches the whole history
        t0 = sum(proc.cpu_times()[:2])
        for _ in range(polls):
            since = client.get("/ui/api/live", params={"since": since}).json()["seq"]
            client.get("/v1/models").raise_for_status()
            q = {} if offset is None else {"offset": offset}
            offset = client.get("/ui/api/logs/demo-0", params=q).json()["offset"]
        cpu_ms = (sum(proc.cpu_times()[:2]) - t0) / polls * 1e3
    share = cpu_ms / 1e3 / interval
    print(
        f"orchestrator CPU per console poll ({polls} polls, idle): {cpu_ms:.2f} ms = {share:.2%} of one core "
        f"at one poll every {interval:g} s"
    )
    return {"cpu_ms_per_poll": cpu_ms, "core_share": share}


def console_cost(ts: list[Target], route: str) -> dict[str, Any] | None:
    """``orch+console`` against ``orchestrator`` round by round: added p50 (ms), tok/s ratios."""
    with_console = next((t for t in ts if t.console), None)
    if with_console is None or with_console.console is None:
        return None
    ours = next(t for t in ts if t.name == "orchestrator")
    lat = zip(with_console.latencies[route], ours.latencies[route], strict=True)
    return {
        "added_p50_ms": statistics.median(statistics.median(a) - statistics.median(b) for a, b in lat) * 1e3,
        "ratio_1": statistics.median(a / b for a, b in zip(with_console.tps1[route], ours.tps1[route], strict=True)),
        "ratio_n": statistics.median(a / b for a, b in zip(with_console.tpsn[route], ours.tpsn[route], strict=True)),
        "polls": with_console.console.polls,
        "interval_s": with_console.console.interval,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--requests", type=int, default=30, help="non-streamed requests per target per round")
    ap.add_argument("--tokens", type=int, default=128, help="tokens per stream")
    ap.add_argument("--streams", type=int, default=4, help="concurrent streams")
    ap.add_argument("--routes", default="chat", help=f"comma-separated, from {', '.join(ROUTES)}")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument(
        "--console",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="also measure our endpoint while a web console polls it every SECONDS (the page polls every 2)",
    )
    ap.add_argument("--serve-bare", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--poll-console", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_bare:
        serve_bare(args.serve_bare)
        return 0
    if args.poll_console:
        poll_console(args.poll_console, args.console)
        return 0
    # SIGTERM (e.g. from `timeout`) must unwind like Ctrl-C so the children are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    routes = [r.strip() for r in args.routes.split(",") if r.strip()]
    unknown = sorted(set(routes) - set(ROUTES))
    if unknown:
        ap.error(f"--routes: unknown {', '.join(unknown)}; choose from {', '.join(ROUTES)}")
    with tempfile.TemporaryDirectory(prefix="bench-proxy-") as tmp, targets(Path(tmp)) as urls:
        print("targets: " + ", ".join(f"{k} {v}" for k, v in urls.items()), flush=True)
        ts = asyncio.run(run_rounds(urls, args.rounds, args.requests, args.tokens, args.streams, routes, args.console))
        rows = {route: report(ts, args.streams, route) for route in routes}
        if args.console:
            rows["console_poll_cpu"] = poll_cpu(urls["orchestrator"], args.console)
    if args.json:
        args.json.write_text(
            json.dumps(
                {"args": {k: v for k, v in vars(args).items() if k != "json"}, "rows": rows}, indent=2, default=str
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
