"""The console's routes and its sampler task (``Console``); see the package docstring for the table."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import mimetypes
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response

from orchestrator.errors import ApiError
from orchestrator.host import disk
from orchestrator.serve.console.access import HEADERS, ConsoleAccess
from orchestrator.serve.console.files import FIRST_LINES, bench_summary, find_bench, read_log
from orchestrator.serve.console.history import History

if TYPE_CHECKING:
    from orchestrator.config.schema import Config
    from orchestrator.serve.http.auth import ApiKeys
    from orchestrator.serve.info import InfoViews
    from orchestrator.serve.metrics import ProxyMetrics
    from orchestrator.supervise.scheduler import ModelScheduler
    from orchestrator.supervise.supervisor import Supervisor

_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


@functools.cache
def _load_static() -> dict[str, tuple[bytes, str]]:
    """Every file under ``static/``: relative path -> (bytes, content type); read once per process."""
    out: dict[str, tuple[bytes, str]] = {}

    def walk(node: Any, prefix: str) -> None:
        for child in node.iterdir():
            name = prefix + child.name
            if child.is_dir():
                walk(child, name + "/")
            elif not child.name.endswith(".md"):
                suffix = Path(child.name).suffix
                kind = _TYPES.get(suffix) or mimetypes.guess_type(child.name)[0] or "application/octet-stream"
                if kind.startswith("text/") and "charset" not in kind:
                    kind += "; charset=utf-8"
                out[name] = (child.read_bytes(), kind)

    walk(resources.files(__package__).joinpath("static"), "")
    return out


class Console:
    """The console of one app: its files, its chart history and its sampler task.

    Args:
        config: the validated models.yaml.
        supervisor: the instances (log paths, snapshot).
        metrics: the app's ``ProxyMetrics`` (read by the sampler).
        keys: the app's ``ApiKeys``.
        bench_dirs: folders searched for the last bench report (default: ``results/`` under
            the working directory and under the config file's folder, as ``orchestrator bench``
            writes by default).
    """

    def __init__(
        self,
        config: Config,
        supervisor: Supervisor,
        metrics: ProxyMetrics,
        keys: ApiKeys,
        *,
        bench_dirs: list[Path] | None = None,
    ) -> None:
        self.supervisor = supervisor
        self.access = ConsoleAccess(config, keys)
        self.history = History(supervisor, metrics)
        self.files = _load_static()
        self.scheduler: ModelScheduler | None = None  # set by mount_console: lifecycle rows for the page
        self.views: InfoViews | None = None  # set by mount_console: peers, the draft-length choices
        if bench_dirs is None:
            bench_dirs = [Path.cwd() / "results"]
            if config.path:
                bench_dirs.append(Path(config.path).resolve().parent / "results")
        self.bench_dirs = bench_dirs
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the chart sampler (call from the app's event loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.history.run(), name="console history")

    async def stop(self) -> None:
        """Stop the chart sampler."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def mount(self, app: FastAPI) -> None:
        """Add the console's routes to ``app`` (after its API routes)."""

        @app.get("/", include_in_schema=False)
        @app.get("/ui", include_in_schema=False)
        async def to_console(request: Request) -> Response:
            self.access.check_page(request)
            return RedirectResponse("/ui/", status_code=307, headers=HEADERS)

        @app.get("/ui/api/live", include_in_schema=False)
        async def live(request: Request, since: int = 0) -> JSONResponse:
            self.access.check_data(request)
            data = self.live(since)
            if self.views is not None:  # peers and where requests went; the per-request K choices
                data["peers"] = self.views.peers.snapshot()
                data["draft_policy"] = self.views.tuner.status()
                cache = self.views.prompt_cache  # prompt-cache hits per client session
                data["sessions"] = cache.sessions.snapshot() if cache is not None else {}
            return JSONResponse(data, headers=HEADERS)

        @app.get("/ui/api/logs/{instance}", include_in_schema=False)
        async def logs(request: Request, instance: str, offset: int | None = None) -> JSONResponse:
            self.access.check_data(request)
            inst = next((i for i in self.supervisor.instances if i.name == instance), None)
            if inst is None:
                names = ", ".join(i.name for i in self.supervisor.instances)
                raise ApiError(404, f"no instance {instance!r}; instances: {names}", code="not_found")
            if offset is not None and offset < 0:
                raise ApiError(400, "offset must be >= 0 (bytes)", param="offset")
            if disk.failing(f"log {inst.log_path.name}"):  # the file is stale: show the in-memory tail
                tail = {"memory": True, "offset": 0, "size": 0, "lines": inst.log_tail(FIRST_LINES)}
                return JSONResponse({"instance": instance, **tail}, headers=HEADERS)
            return JSONResponse({"instance": instance, **read_log(inst.log_path, offset)}, headers=HEADERS)

        @app.get("/ui/api/bench", include_in_schema=False)
        async def bench(request: Request) -> JSONResponse:
            self.access.check_data(request)
            path = find_bench(self.bench_dirs)
            if path is None:
                folders = ", ".join(str(d) for d in self.bench_dirs)
                return JSONResponse({"found": False, "searched": folders}, headers=HEADERS)
            return JSONResponse(bench_summary(path), headers=HEADERS)

        @app.get("/ui/api/bench/plot", include_in_schema=False)
        async def bench_plot(request: Request) -> Response:
            self.access.check_data(request)
            path = find_bench(self.bench_dirs)
            if path is None or not (path.parent / "sweep.png").is_file():
                raise ApiError(404, "no bench plot: run `orchestrator bench` first", code="not_found")
            return FileResponse(path.parent / "sweep.png", media_type="image/png", headers=HEADERS)

        @app.get("/ui/{name:path}", include_in_schema=False)
        async def static(request: Request, name: str) -> Response:
            self.access.check_page(request)
            found = self.files.get(name or "index.html")
            if found is None:
                raise ApiError(404, f"no console file {name!r}", code="not_found")
            body, kind = found
            return Response(body, media_type=kind, headers=HEADERS)

    def live(self, since: int) -> dict[str, Any]:
        """The page's poll: instance rows with resident memory (bytes) and new chart points."""
        rows = []
        rss = self.history.rss
        for row in self.supervisor.snapshot():
            row["rss_bytes"] = rss.get(row["name"])
            rows.append(row)
        return {
            "interval_s": self.history.interval,
            "seq": self.history.last_seq,
            "instances": rows,
            "models": self.scheduler.snapshot() if self.scheduler is not None else [],
            "disk": disk.faults(),  # files that cannot be written (full or read-only disk)
            "points": self.history.since(since),
        }


def mount_console(
    app: FastAPI,
    config: Config,
    supervisor: Supervisor,
    metrics: ProxyMetrics,
    keys: ApiKeys,
    scheduler: ModelScheduler | None = None,
    views: InfoViews | None = None,
) -> Console:
    """Build the console for ``app`` and add its routes; start it with ``Console.start()``.

    With a ``scheduler``, the page's poll carries each model's lifecycle row (``models``).
    """
    console = Console(config, supervisor, metrics, keys)
    console.scheduler = scheduler
    console.views = views
    if scheduler is not None:
        console.history.waiting = lambda: {r["model"]: int(r.get("queued") or 0) for r in scheduler.snapshot()}
    console.mount(app)
    return console
