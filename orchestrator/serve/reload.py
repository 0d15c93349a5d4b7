"""Hot reload of models.yaml while ``orchestrator up`` runs: on a file change (``watchfiles``), on
SIGHUP, and on ``POST /reload`` (``orchestrator reload``).

A reload reads and validates the file, adds the GGUFs found in ``models_dirs``, plans the launch,
and hands the result to ``ModelControl.apply`` (which restarts only what changed); then the
router and the request repair take the new names, aliases and policies. When the file is invalid
or the change needs a full restart, nothing changes: the located error is logged, shown in
``GET /status`` (``config_error``) and returned to ``orchestrator reload`` (exit status 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.errors import ApiError, UserError
from orchestrator.supervise.control import RestartRequired

if TYPE_CHECKING:
    from orchestrator.config.schema import Config
    from orchestrator.launch.spec import InstanceSpec
    from orchestrator.serve.forward import Forwarder
    from orchestrator.serve.routing import Router
    from orchestrator.supervise.control import ModelControl, ReloadReport

log = logging.getLogger("orchestrator.reload")

#: Reads, expands and plans a models.yaml: ``prepare(path) -> (config, specs, notes)``.
Prepare = Callable[[Path], "tuple[Config, list[InstanceSpec], list[str]]"]


class ConfigReloader:
    """Re-reads ``path`` and applies it to the running models and the app.

    Args:
        path: the models.yaml ``up`` was started with.
        prepare: load + discovery + launch plan (``orchestrator.cli.up`` builds it: it knows the
            native build and the GPUs); raises ``UserError`` for an invalid file.
        control: applies the new plan to the models.
        router, forwarder: take the new names and repair policies once applied.
        on_note: where lines for people go (the ``up`` display).
    """

    def __init__(
        self,
        path: Path,
        prepare: Prepare,
        control: ModelControl,
        router: Router,
        forwarder: Forwarder,
        on_note: Callable[[str], None] = log.warning,
    ) -> None:
        self.path = path
        self.prepare = prepare
        self.control = control
        self.router = router
        self.forwarder = forwarder
        self.on_note = on_note
        self.reloads = 0

    async def reload(self, why: str) -> ReloadReport:
        """Apply the file as it is now (``why``: ``file changed``, ``SIGHUP``, ``request``).

        Raises:
            ApiError: 400 ``config_invalid`` (the located problems) or 409 ``restart_required``;
                the running config stays and ``GET /status`` shows the problem.
        """
        scheduler = self.control.scheduler
        try:
            config, specs, notes = await asyncio.to_thread(self.prepare, self.path)
            report = await self.control.apply(config, specs)
        except UserError as err:
            text = str(err) + (f" ({err.hint})" if err.hint else "")
            scheduler.config_error = text
            self.on_note(f"reload ({why}) refused, still serving the previous config: {text}")
            if isinstance(err, RestartRequired):
                raise ApiError(409, text, code="restart_required") from None
            raise ApiError(400, text, code="config_invalid") from None
        self.router.update(config)
        self.forwarder.update(config)
        self.forwarder.peers.update_local(config)
        self.reloads += 1
        for note in notes:
            self.on_note(note)
        self.on_note(f"reloaded {self.path} ({why}): {report.summary()}")
        return report

    async def watch(self) -> None:
        """Reload whenever the file changes (until cancelled). Editors often replace the file (write a
        temporary one, rename it over), so its folder is watched and events are filtered by name."""
        from watchfiles import awatch

        target = self.path.resolve()

        def ours(_change: object, path: str) -> bool:
            return Path(path).resolve() == target

        async for _ in awatch(target.parent, watch_filter=ours, debounce=300, recursive=False):
            with contextlib.suppress(ApiError):  # logged and shown in /status by reload()
                await self.reload("file changed")


class Reloading:
    """While entered, reload on SIGHUP and on file changes (``with Reloading(reloader):``)."""

    def __init__(self, reloader: ConfigReloader | None) -> None:
        self.reloader = reloader
        self._tasks: set[asyncio.Task[None]] = set()

    def __enter__(self) -> Reloading:
        if self.reloader is not None:
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGHUP, self._on_hup)
            self._spawn(self.reloader.watch())
        return self

    def __exit__(self, *exc: object) -> None:
        if self.reloader is not None:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        for task in self._tasks:
            task.cancel()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro, name="reload")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_hup(self) -> None:
        self._spawn(self._reload("SIGHUP"))

    async def _reload(self, why: str) -> None:
        assert self.reloader is not None
        with contextlib.suppress(ApiError):  # logged and shown in /status by reload()
            await self.reloader.reload(why)
