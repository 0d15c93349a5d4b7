"""``orchestrator up``'s runtime: launch and supervise the llama-servers, serve one endpoint.

The caller (``orchestrator.cli.up``) has already done everything that can refuse before a model
loads (config, build, GPU detection, launch plan, fixed ports, a second orchestrator);
``serve_up`` binds the proxy port (refusing too when it is taken), then runs one asyncio loop on
the main thread with the supervisor (children are forked from this thread, so their parent-death
signal follows the process's life) and uvicorn serving ``orchestrator.serve.app.create_app``.
What the person sees goes through a ``Display`` the caller provides.

SIGINT/SIGTERM: ``Served.draining = True`` (new requests get 503), in-flight requests get up
to ``server.timeouts.shutdown_grace`` seconds, then the server and the children stop (prompt
caches saved first, ``kv_persist``). A second signal skips the waits for in-flight responses
(the drain's and uvicorn's; the children's stop ends them); one during the saves skips those.
``run.json`` (see ``orchestrator.host.statefile``) is published while running and removed on
exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.errors import UserError
from orchestrator.host import statefile
from orchestrator.host.ports import SERVER_PORT_FIX, check_port_free
from orchestrator.serve.app import Served, create_app, served_by
from orchestrator.serve.http.limits import uvicorn_config
from orchestrator.serve.reload import ConfigReloader, Prepare, Reloading
from orchestrator.supervise.budget import budget_for
from orchestrator.supervise.model_state import ModelState
from orchestrator.supervise.scheduler import ModelScheduler
from orchestrator.supervise.supervisor import RUNNING, SERVING, Supervisor

if TYPE_CHECKING:
    from orchestrator.config.schema import Config
    from orchestrator.launch.spec import InstanceSpec


class Display(Protocol):
    """What ``up`` tells the person; ``orchestrator.cli.up`` renders it (a live table or lines)."""

    def loading(self, url: str, instances: int, log_dir: Path) -> None:
        """The endpoint is bound and ``instances`` llama-servers are loading."""

    def start(self) -> None:
        """Begin showing the instances' states."""

    def refresh(self) -> None:
        """An instance's state may have changed."""

    def failed(self, name: str, message: str | None) -> None:
        """Instance ``name`` could not start, because of ``message``."""

    def ready(self, url: str, seconds: float) -> None:
        """Every instance settled and at least one serves, ``seconds`` after the start."""

    def none_started(self) -> None:
        """Every instance settled and none serves."""

    def note(self, text: str) -> None:
        """One plain line (draining, stopping, the HTTP server died)."""

    def stop(self) -> None:
        """Stop showing the instances (always called, also on errors)."""

    def stopped(self) -> None:
        """Everything stopped cleanly."""


def serve_up(
    config: Config,
    specs: list[InstanceSpec],
    display: Callable[[Supervisor], Display],
    prepare: Prepare | None = None,
) -> int:
    """Serve ``specs`` behind one endpoint until SIGINT/SIGTERM.

    Args:
        config: the validated config.
        specs: the launch plan (``orchestrator.launch.plan.plan_launch``).
        display: makes the ``Display`` for the supervisor of this run.
        prepare: reads, expands and plans ``config.path`` again; with it, models.yaml is reloaded
            on change, on SIGHUP and on ``POST /reload`` (``orchestrator.serve.reload``).

    Returns:
        0 after a clean shutdown; 1 when every instance failed to start or the HTTP server died.

    Raises:
        UserError: the proxy port (``server.port``) cannot be bound.
    """
    sock = _bind_proxy_socket(config)
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            return runner.run(_serve(config, specs, sock, display, prepare))
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
    """Bind the proxy's listening socket now, before any model loads, and hand it to uvicorn.

    Binding once and keeping the socket means no other process can take the port between the
    check and the server start. (``scripts/bench_proxy.py`` patches this function by name.)
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
        check_port_free(host, port, where=config.where("server", "port"), fix=SERVER_PORT_FIX)  # names the holder
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


def _make_server(app: Any, config: Config) -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # `up` owns SIGINT/SIGTERM: it drains and stops the children before uvicorn exits
            yield

    grace = config.server.timeouts.shutdown_grace
    limits = (config.server.max_header_bytes, config.server.timeouts.client_header)
    return Server(uvicorn_config(app, *limits, log_level="warning", timeout_graceful_shutdown=max(1, int(grace) + 1)))


def _publish(config: Config, supervisor: Supervisor, url: str, started: float) -> None:
    me = os.getpid()
    statefile.write(
        {
            "pid": me,
            "pid_started": statefile.process_start_time(me),
            "endpoint": url,
            "config": str(Path(config.path).resolve()) if config.path else None,
            "api_key": next(iter(supervisor.config.server.api_keys), None),  # the running config's
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


class _Signals:
    """SIGINT/SIGTERM while ``up`` runs: the first starts draining, a second skips the drain's wait,
    and one while the prompt caches are being saved before the children stop skips the saves."""

    def __init__(self, served: Served) -> None:
        self.served = served
        self.count = 0
        self.stop = asyncio.Event()
        self.saving = False  # the stop's prompt-cache saves began (the note asking for a signal is out)
        self.again = asyncio.Event()  # a second signal: no more waiting for in-flight responses

    def __enter__(self) -> _Signals:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)

    def _on_signal(self) -> None:
        self.count += 1
        self.served.draining = True
        self.stop.set()
        if self.count >= 2:
            self.again.set()
        cache = self.served.router.prompt_cache
        if self.saving and cache is not None:
            # only a signal after the saves began: a quick double Ctrl-C skips the drain, not them
            cache.hurry.set()


async def _serve(
    config: Config,
    specs: list[InstanceSpec],
    sock: socket.socket,
    make_display: Callable[[Supervisor], Display],
    prepare: Prepare | None,
) -> int:
    started = time.time()
    supervisor = Supervisor(specs, config, log_dir=statefile.log_dir())
    gpu_indices = sorted({g for s in specs for g in s.gpus})
    scheduler = ModelScheduler(supervisor, budget_for(config.server, gpu_indices=gpu_indices))
    app = create_app(config, supervisor, scheduler)
    served = served_by(app)
    server = _make_server(app, config)
    url = endpoint_url(config, sock.getsockname()[1])
    display = make_display(supervisor)
    me = os.getpid()
    if prepare is not None and config.path is not None:
        served.reloader = ConfigReloader(Path(config.path), prepare, scheduler, display.note)
    with _Signals(served) as signals, Reloading(served.reloader) as reloading:
        try:
            _publish(config, supervisor, url, started)
            serve_task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]), name="uvicorn")
            notes = await scheduler.start()
            loading = sum(len(m.instances) for m in scheduler.models.values() if m.state is ModelState.LOADING)
            display.loading(url, loading, supervisor.log_dir)
            for note in notes:
                display.note(note)
            display.start()
            exit_code = await _watch(config, scheduler, url, started, display, serve_task, signals.stop)
            await reloading.stop()  # a reload backlog never delays the shutdown
            await _drain(supervisor, display, signals)
            await _stop_http(server, serve_task, signals, supervisor.config.server.timeouts.shutdown_grace + 5)
            saving = any(m.kv_persist for m in supervisor.config.models)
            display.note("stopping llama-server instances" + (saving * " (saving prompt caches: signal again to skip)"))
            signals.saving = True
            await scheduler.close(supervisor.policy.stop_grace)
            await supervisor.stop(supervisor.policy.stop_grace)
            await _http_stopped(serve_task)
        finally:
            supervisor.kill_now()
            display.stop()
            statefile.remove(me)
    display.stopped()
    return exit_code


async def _watch(
    config: Config,
    scheduler: ModelScheduler,
    url: str,
    started: float,
    display: Display,
    serve_task: asyncio.Task[None],
    stop: asyncio.Event,
) -> int:
    """Publish and show every change until a stop signal (0), or until the HTTP server dies or
    nothing can serve (1: every model loaded at start failed and none loads on demand). Announces
    readiness once the models loaded at start have settled."""
    supervisor = scheduler.supervisor
    loop = asyncio.get_running_loop()
    announced = False
    stop_task = loop.create_task(stop.wait())
    try:
        while not stop.is_set():
            changed = loop.create_task(supervisor.changed.wait())
            done, _ = await asyncio.wait(
                {changed, stop_task, serve_task}, timeout=2.0, return_when=asyncio.FIRST_COMPLETED
            )
            changed.cancel()
            if serve_task in done:
                display.note(f"the HTTP server stopped unexpectedly: {serve_task.exception()!r}")
                return 1
            # the banner goes out before run.json says the instances serve (scripts wait on run.json)
            if not announced and _settled(scheduler):
                announced = True
                if not _announce(scheduler, display, url, started):
                    return 1
            _publish(config, supervisor, url, started)
            display.refresh()
        return 0
    finally:
        stop_task.cancel()


def _settled(scheduler: ModelScheduler) -> bool:
    """Every model loaded at start serves or failed (its replicas all serve counts: the scheduler
    marks it READY a moment later)."""
    return not any(
        m.state is ModelState.LOADING and m.startup and not all(i.state in SERVING for i in m.instances)
        for m in scheduler.models.values()
    )


def _announce(scheduler: ModelScheduler, display: Display, url: str, started: float) -> bool:
    """Say which models failed at start, then "ready"; False when nothing at all can serve."""
    models = list(scheduler.models.values())
    for m in models:
        if m.state is ModelState.FAILED:
            display.failed(m.name, m.reason)
    if not any(m.state is not ModelState.FAILED for m in models):
        display.none_started()
        return False
    display.ready(url, time.time() - started)
    return True


async def _stop_http(server: Any, serve_task: asyncio.Task[None], signals: _Signals, timeout: float) -> None:
    """Tell uvicorn to stop and wait until it did, for up to ``timeout`` s: it waits for open
    responses (a stream in flight) first. A second signal ends this wait (uvicorn goes on waiting:
    the children stop next, which ends those responses, and ``_http_stopped`` waits for it)."""
    server.should_exit = True
    again = asyncio.ensure_future(signals.again.wait())
    try:
        await asyncio.wait({serve_task, again}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        again.cancel()


async def _http_stopped(serve_task: asyncio.Task[None]) -> None:
    """uvicorn's end, after the children stopped (their responses ended): at most 10 s more."""
    done, _ = await asyncio.wait({serve_task}, timeout=10)
    if not done:
        serve_task.cancel()
    with contextlib.suppress(BaseException):
        await serve_task


async def _drain(supervisor: Supervisor, display: Display, signals: _Signals) -> None:
    """New requests get 503 (``Served.draining``); in-flight ones get the grace period, unless a
    second signal arrives."""
    signals.served.draining = True
    grace = supervisor.config.server.timeouts.shutdown_grace
    deadline = time.monotonic() + grace
    if any(i.in_flight for i in supervisor.instances):
        display.note(f"draining: waiting up to {grace:g} s for in-flight requests (signal again to skip)")
    while time.monotonic() < deadline and signals.count < 2 and any(i.in_flight for i in supervisor.instances):
        await asyncio.sleep(0.1)
