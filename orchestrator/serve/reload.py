"""Hot reload of models.yaml while ``orchestrator up`` runs: on a file change (``watchfiles``), on
SIGHUP, and on ``POST /reload`` (``orchestrator reload``).

A reload reads and validates the file, adds the GGUFs found in ``models_dirs``, plans the launch,
and hands the result to ``ModelScheduler.apply``, which swaps it in as the running config in one
step (every reader sees the new names, keys, timeouts and policies on its next request) and then
restarts only what changed. When the file is invalid or the change needs a full restart, nothing
changes: the located error is logged, shown in ``GET /status`` (``config_error``) and returned to
``orchestrator reload`` (exit status 1).

Who may call changes first. Every request for a reload also reads the file at once, outside the
queue of reloads, and a valid one's API keys (``rollout.AUTH_KEYS``) become current
(``ModelScheduler.take_auth``) before the launch is planned (seconds) and while an earlier
reload's restart still drains: a key the edit removed is refused from then on. A reload applied
later never brings back the keys of a file read before the newest one. A plan that is then
refused leaves the new keys in force (a removed key stays removed).

Reloads are serial and coalesced: one runs at a time, and every request for a reload that arrives
while one runs joins the one pending reload after it (a burst of SIGHUPs and edits is at most two
reloads, the second reading the file as it is by then). ``Reloading.stop`` drops the pending one
and cancels the running one, so a shutdown never waits for a backlog.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.config.load import load_config
from orchestrator.errors import ApiError, UserError
from orchestrator.supervise.rollout import NO_CHANGE, RestartRequired, with_auth

if TYPE_CHECKING:
    from orchestrator.config.schema import Config, ServerConfig
    from orchestrator.launch.spec import InstanceSpec
    from orchestrator.supervise.rollout import ReloadReport
    from orchestrator.supervise.scheduler import ModelScheduler

log = logging.getLogger("orchestrator.reload")

#: Reads, expands and plans a models.yaml: ``prepare(path) -> (config, specs, notes)``.
Prepare = Callable[[Path], "tuple[Config, list[InstanceSpec], list[str]]"]


class ConfigReloader:
    """Re-reads ``path`` and applies it to the running models, one reload at a time.

    Args:
        path: the models.yaml ``up`` was started with.
        prepare: load + discovery + launch plan (``orchestrator.cli.up`` builds it: it knows the
            native build and the GPUs); raises ``UserError`` for an invalid file.
        scheduler: applies the new plan to the models (and swaps the running config).
        on_note: where lines for people go (the ``up`` display).
        read: reads and validates the file alone (the API keys' early step); raises ``UserError``.

    ``reloads`` counts reloads applied, ``attempts`` every reload run (applied or refused).
    """

    def __init__(
        self,
        path: Path,
        prepare: Prepare,
        scheduler: ModelScheduler,
        on_note: Callable[[str], None] = log.warning,
        read: Callable[[Path], Config] = load_config,
    ) -> None:
        self.path = path
        self.prepare = prepare
        self.scheduler = scheduler
        self.on_note = on_note
        self.read = read
        # reads of the file, numbered in the order they start; the newest whose keys are in force
        self._reads = 0
        self._auth: tuple[int, ServerConfig] | None = None
        self._auth_task: asyncio.Task[None] | None = None
        self._auth_again = False
        self.reloads = 0
        self.attempts = 0
        # the last reload that changed something: (time.time(), why, summary); `orchestrator reload`
        # right after the file watcher applied an edit says so instead of a bare "no change"
        self.last_change: tuple[float, str, str] | None = None
        self._pending: tuple[asyncio.Future[ReloadReport], str] | None = None
        self._worker: asyncio.Task[None] | None = None

    def request(self, why: str) -> asyncio.Future[ReloadReport]:
        """Ask for a reload (``why``: ``file changed``, ``SIGHUP``, ``request``) and return its result
        to come: the pending reload's, when one already waits (coalesced), else a new pending one
        that runs once the running one (if any) ends."""
        self._take_auth_soon()
        if self._pending is None:
            future: asyncio.Future[ReloadReport] = asyncio.get_running_loop().create_future()
            future.add_done_callback(_retrieve)  # a refused reload nobody awaits is logged, not warned
            self._pending = (future, why)
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._run(), name="reload")
        return self._pending[0]

    async def reload(self, why: str) -> ReloadReport:
        """Reload and wait for it (see ``request``); the caller giving up does not cancel it.

        Raises:
            ApiError: 400 ``config_invalid`` (the located problems) or 409 ``restart_required``;
                the running config stays and ``GET /status`` shows the problem.
        """
        return await asyncio.shield(self.request(why))

    async def stop(self) -> None:
        """Drop the pending reload and cancel the running one (shutdown)."""
        if self._pending is not None:
            self._pending[0].cancel()
            self._pending = None
        if self._auth_task is not None:
            self._auth_task.cancel()
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker

    async def _run(self) -> None:
        while self._pending is not None:
            future, why = self._pending
            self._pending = None
            try:
                report = await self._reload_once(why)
            except ApiError as err:
                if not future.done():
                    future.set_exception(err)
            except BaseException:
                future.cancel()
                raise
            else:
                if not future.done():
                    future.set_result(report)

    def _take_auth_soon(self) -> None:
        """Read the file now and make its keys current (``_take_auth``), coalesced like reloads."""
        if self._auth_task is not None and not self._auth_task.done():
            self._auth_again = True
            return
        self._auth_task = asyncio.get_running_loop().create_task(self._take_auth(), name="reload keys")

    async def _take_auth(self) -> None:
        self._auth_again = True
        while self._auth_again:
            self._auth_again = False
            self._reads += 1
            n = self._reads
            try:
                config = await asyncio.to_thread(self.read, self.path)
            except (UserError, OSError):
                continue  # the reload itself says why
            self._newest_auth(n, config)

    def _newest_auth(self, n: int, config: Config) -> Config:
        """``config``, the file as read by read number ``n``, with the keys of the newest read: its
        own (made current at once) when no later read was taken meanwhile."""
        if self._auth is not None and self._auth[0] > n:
            return with_auth(config, self._auth[1])
        if self.scheduler.take_auth(config):
            self._auth = (n, config.server)
        return config

    async def _reload_once(self, why: str) -> ReloadReport:
        self.attempts += 1
        self._reads += 1
        n = self._reads
        try:
            config, specs, notes = await asyncio.to_thread(self.prepare, self.path)
            report = await self.scheduler.apply(self._newest_auth(n, config), specs)
        except UserError as err:
            text = str(err) + (f" ({err.hint})" if err.hint else "")
            self.scheduler.refused(text)
            self.on_note(f"reload ({why}) refused, still serving the previous config: {text}")
            if isinstance(err, RestartRequired):
                raise ApiError(409, text, code="restart_required") from None
            raise ApiError(400, text, code="config_invalid") from None
        self.reloads += 1
        for note in notes:
            self.on_note(note)
        self.on_note(f"reloaded {self.path} ({why}): {report.summary()}")
        if report.summary() != NO_CHANGE:
            self.last_change = (time.time(), why, report.summary())
        return report

    def summary(self, report: ReloadReport) -> str:
        """``report``'s summary; for no change, the last reload that did change something, if any."""
        said = report.summary()
        if said != NO_CHANGE or self.last_change is None:
            return said
        at, why, what = self.last_change
        return (
            f"{said} (already applied by the {why} reload at {time.strftime('%H:%M:%S', time.localtime(at))}: {what})"
        )

    async def watch(self) -> None:
        """Ask for a reload whenever the file changes (until cancelled). Editors often replace the
        file (write a temporary one, rename it over), so its folder is watched and events are
        filtered by name."""
        from watchfiles import awatch

        target = self.path.resolve()

        def ours(_change: object, path: str) -> bool:
            return Path(path).resolve() == target

        async for _ in awatch(target.parent, watch_filter=ours, debounce=300, recursive=False):
            self.request("file changed")


def _retrieve(future: asyncio.Future[ReloadReport]) -> None:
    if not future.cancelled():
        future.exception()  # refusals are logged and shown in /status by _reload_once


class Reloading:
    """While entered, reload on SIGHUP and on file changes (``with Reloading(reloader):``)."""

    def __init__(self, reloader: ConfigReloader | None) -> None:
        self.reloader = reloader
        self._watch: asyncio.Task[None] | None = None

    def __enter__(self) -> Reloading:
        if self.reloader is not None:
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGHUP, self.reloader.request, "SIGHUP")
            self._watch = loop.create_task(self.reloader.watch(), name="reload watch")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.reloader is not None:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        if self._watch is not None:
            self._watch.cancel()

    async def stop(self) -> None:
        """Stop reloading now (shutdown): no new reloads, the pending one dropped, the running one
        cancelled."""
        if self.reloader is not None:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
            if self._watch is not None:
                self._watch.cancel()
            await self.reloader.stop()
