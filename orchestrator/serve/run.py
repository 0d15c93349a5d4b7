"""``orchestrator up``: plan, launch and supervise the llama-servers, serve one endpoint.

Order matters (case S02): everything that can refuse (config, build, GPU detection, launch
plan, fixed ports, the proxy port, a second orchestrator) refuses before any model is loaded.
Then one asyncio loop, on the main thread, runs the supervisor (children are forked from this
thread, so their parent-death signal follows the process's life) and uvicorn serving
``orchestrator.serve.app.create_app``.

SIGINT/SIGTERM: ``app.state.draining = True`` (new requests get 503), in-flight requests get up
to ``server.timeouts.shutdown_grace`` seconds, then the server and the children stop. A second
signal skips the wait. ``run.json`` (see ``statefile``) is published while running and removed
on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.errors import UserError
from orchestrator.host import statefile

if TYPE_CHECKING:
    from rich.console import Console

    from orchestrator.config.schema import Config
    from orchestrator.launch.plan import InstanceSpec
    from orchestrator.supervise.supervisor import Supervisor


def run_up(config_path: Path, dry_run: bool = False, force: bool = False) -> int:
    """Run ``orchestrator up`` until SIGINT/SIGTERM.

    Args:
        config_path: models.yaml.
        dry_run: print the launch plan and return 0 without starting anything.
        force: launch even when the fit check says a model will not fit.

    Returns:
        0 after a clean shutdown; 1 when every instance failed to start.

    Raises:
        UserError: bad config, no native build, busy port, or an orchestrator already running.
    """
    from rich.console import Console

    from orchestrator.config.schema import load_config
    from orchestrator.host import gpus
    from orchestrator.launch import plan as launch
    from orchestrator.native import build

    console = Console(highlight=False)
    config = load_config(Path(config_path))
    try:
        build_info = build.locate()
    except UserError as err:
        raise UserError(
            f"{err} — the native llama.cpp build is missing, so nothing can be launched yet",
            hint="run `orchestrator build` first (about 8 minutes on 2 CPU cores; it shows progress)",
        ) from None
    found, source = gpus.detect_gpus()
    if not dry_run:
        statefile.claim()
    specs = launch.plan_launch(config, gpus=found, build=build_info, force=force, check_ports=not dry_run)
    if dry_run:
        console.print(f"GPUs: {source}" if not found else f"GPUs ({source}): " + ", ".join(g.name for g in found))
        console.print(launch.render_plan(specs), soft_wrap=True)
        return 0
    sock = _bind_proxy_socket(config)
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            return runner.run(_serve(config, specs, sock, console))
    finally:
        sock.close()


def _loop_factory() -> Any:
    """uvloop's event loop when installed (the proxy's hot path: ~15% less CPU per request), else asyncio's.

    ``up`` owns its loop, so uvicorn's own uvloop selection never runs; we choose here.
    """
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _bind_proxy_socket(config: Config) -> socket.socket:
    """Bind the proxy's listening socket now, before any model loads (S02), and hand it to uvicorn.

    Binding once and keeping the socket means no other process can take the port between the
    check and the server start.
    """
    host, port = config.server.host, config.server.port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must be IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections only
    # when the listening socket says so, and without it every response waits ~40 ms (Nagle +
    # delayed ACK), measured +45 ms per request by scripts/bench_proxy.py.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        from orchestrator.launch.plan import check_port_free

        check_port_free(host, port, where=config.where("server", "port"))  # names the holder
        raise UserError(f"{config.where('server', 'port')}: cannot bind {host}:{port}: {err}") from None
    sock.listen(2048)
    sock.set_inheritable(False)
    return sock


def endpoint_url(config: Config, port: int) -> str:
    """The URL clients use: ``http://HOST:PORT`` (a wildcard bind is shown as 127.0.0.1)."""
    host = config.server.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def examples(config: Config, url: str) -> str:
    """Ready-to-paste curl and Python (openai client) streamed examples for the endpoint."""
    model = config.models[0].name
    key_header = ' -H "Authorization: Bearer $ORCHESTRATOR_API_KEY"' if config.server.api_keys else ""
    key_arg = 'os.environ["ORCHESTRATOR_API_KEY"]' if config.server.api_keys else '"none"'
    body = json.dumps(
        {"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": "Hello!"}], "stream": True}
    )
    lines = [f"endpoint: {url}/v1  (OpenAI-compatible; models: {', '.join(m.name for m in config.models)})"]
    if config.server.api_keys:
        lines.append("export ORCHESTRATOR_API_KEY=<one of server.api_keys in models.yaml>")
    lines += [
        "",
        "curl:",
        f"  curl -N {url}/v1/chat/completions -H 'Content-Type: application/json'{key_header} \\",
        f"    -d '{body}'",
        "",
        "Python:",
    ]
    if config.server.api_keys:
        lines.append("  import os")
    lines += [
        "  from openai import OpenAI",
        f'  client = OpenAI(base_url="{url}/v1", api_key={key_arg})',
        f'  stream = client.chat.completions.create(model="{model}", max_tokens=64, messages=[{{"role": "user", "content": "Hello!"}}], stream=True)',
        "  for chunk in stream:",
        '      print(chunk.choices[0].delta.content or "", end="", flush=True)',
    ]
    return "\n".join(lines)


def status_table(supervisor: Supervisor) -> Any:
    """A rich table of the instances: state, pid, port, model, uptime, restarts, requests."""
    from rich.table import Table
    from rich.text import Text

    styles = {"ready": "green", "degraded": "yellow", "loading": "cyan", "restarting": "yellow", "failed": "red"}
    table = Table(title="instances", title_justify="left")
    for col in ("instance", "state", "pid", "port", "GPUs", "model", "uptime", "restarts", "requests", "note"):
        table.add_column(col)
    for row in supervisor.snapshot():
        state = row["state"]
        note = row["message"] or "; ".join(row["warnings"]) or ""
        table.add_row(
            row["name"],
            f"[{styles.get(state, 'white')}]{state}[/]",
            str(row["pid"] or "-"),
            str(row["port"] or "-"),
            ",".join(map(str, row["gpus"])) or "CPU",
            row["model"],
            _duration(row["uptime_s"]),
            str(row["restarts"]),
            str(row["requests"]),
            Text(note.splitlines()[0][:80] if note else ""),
        )
    return table


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _make_server(app: Any, config: Config) -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # `up` owns SIGINT/SIGTERM: it drains and stops the children before uvicorn exits
            yield

    grace = config.server.timeouts.shutdown_grace
    return Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=max(1, int(grace) + 1)))


def _publish(config: Config, supervisor: Supervisor, url: str, started: float) -> None:
    from orchestrator.supervise.supervisor import RUNNING

    me = os.getpid()
    statefile.write(
        {
            "pid": me,
            "pid_started": statefile.process_start_time(me),
            "endpoint": url,
            "config": str(Path(config.path).resolve()) if config.path else None,
            "api_key": config.server.api_keys[0] if config.server.api_keys else None,
            "started_at": started,
            "log_dir": str(supervisor.log_dir),
            "instances": {
                i.name: {
                    "pid": i.pid if i.state in RUNNING else None,
                    "state": i.state.value,
                    "base_url": i.base_url,
                    "log": str(i.log_path),
                    "exit_code": i.exit_code,
                    "message": i.message,
                }
                for i in supervisor.instances
            },
        }
    )


async def _serve(config: Config, specs: list[InstanceSpec], sock: socket.socket, console: Console) -> int:
    from orchestrator.serve.app import create_app
    from orchestrator.supervise.supervisor import SERVING, TERMINAL, Supervisor

    started = time.time()
    supervisor = Supervisor(specs, config, log_dir=statefile.log_dir())
    app = create_app(config, supervisor)
    app.state.draining = False
    server = _make_server(app, config)
    url = endpoint_url(config, sock.getsockname()[1])
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        app.state.draining = True
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)

    me = os.getpid()
    live = _Display(console, supervisor)
    exit_code = 0
    try:
        _publish(config, supervisor, url, started)
        serve_task = loop.create_task(server.serve(sockets=[sock]), name="uvicorn")
        await supervisor.start()
        live.print(
            f"orchestrator: endpoint {url}, loading {len(specs)} instance(s); logs in {supervisor.log_dir}",
            markup=False,
        )
        live.start()
        announced = False
        stop_task = loop.create_task(stop.wait())
        while not stop.is_set():
            changed = loop.create_task(supervisor.changed.wait())
            done, _ = await asyncio.wait(
                {changed, stop_task, serve_task}, timeout=2.0, return_when=asyncio.FIRST_COMPLETED
            )
            changed.cancel()
            _publish(config, supervisor, url, started)
            live.refresh()
            if serve_task in done:
                live.print(f"the HTTP server stopped unexpectedly: {serve_task.exception()!r}", markup=False)
                exit_code = 1
                break
            states = [i.state for i in supervisor.instances]
            if not announced and all(s in SERVING or s in TERMINAL for s in states):
                announced = True
                for inst in supervisor.instances:
                    if inst.state not in SERVING:
                        live.print(f"{inst.name} failed: {inst.message}", markup=False)
                if any(s in SERVING for s in states):
                    live.print(f"[green]ready[/] in {time.time() - started:.1f} s")
                    live.print(examples(config, url), markup=False)
                else:
                    live.print("[red]no instance could start; see the messages above and `orchestrator logs NAME`[/]")
                    exit_code = 1
                    break
        # drain: new requests get 503 (app.state.draining); in-flight ones get the grace period
        app.state.draining = True
        grace = config.server.timeouts.shutdown_grace
        deadline = time.monotonic() + grace
        if any(i.in_flight for i in supervisor.instances):
            live.print(f"draining: waiting up to {grace:g} s for in-flight requests (signal again to skip)")
        while time.monotonic() < deadline and signals < 2 and any(i.in_flight for i in supervisor.instances):
            await asyncio.sleep(0.1)
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(serve_task, timeout=grace + 5)
        live.print("stopping llama-server instances")
        await supervisor.stop(supervisor.policy.stop_grace)
    finally:
        supervisor.kill_now()
        live.stop()
        statefile.remove(me)
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    console.print("orchestrator stopped")
    return exit_code


class _Display:
    """The status table: a rich Live table on a terminal, one line per state change otherwise."""

    def __init__(self, console: Console, supervisor: Supervisor) -> None:
        self.console = console
        self.supervisor = supervisor
        self._live: Any = None
        self._seen: dict[str, str] = {}

    def start(self) -> None:
        if self.console.is_terminal:
            from rich.live import Live

            self._live = Live(status_table(self.supervisor), console=self.console, refresh_per_second=2)
            self._live.start()
        self.refresh()

    def refresh(self) -> None:
        if self._live is not None:
            self._live.update(status_table(self.supervisor))
            return
        for inst in self.supervisor.instances:
            text = inst.state.value + (f" ({inst.message.splitlines()[0]})" if inst.message else "")
            if self._seen.get(inst.name) != text:
                self._seen[inst.name] = text
                port = inst.base_url.rsplit(":", 1)[1] if inst.base_url else "-"
                self.console.print(
                    f"{inst.name}: {text} (pid {inst.pid or '-'}, port {port})", markup=False, soft_wrap=True
                )

    def print(self, text: str, *, markup: bool = True) -> None:
        # soft_wrap: commands stay on their lines, so they can be pasted even from a pipe or log
        self.console.print(text, markup=markup, soft_wrap=True)
        sys.stdout.flush()

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
