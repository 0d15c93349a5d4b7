"""The build's progress on the terminal: a rich bar, or plain percent lines in a CI log (shared by
``orchestrator build`` and ``build --source``)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


class RichBuildProgress:
    """A ``native.make.BuildProgress`` drawn as a rich progress bar; on a non-terminal (CI
    logs) a plain ``compile [n/N] p%`` line every 10 percent instead."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.bar = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}", style="cyan"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.task = self.bar.add_task("", total=None)
        self.plain_every = 0 if console.is_terminal else 10  # percent
        self.last_pct = -self.plain_every

    def __enter__(self) -> RichBuildProgress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(None, None, None)

    def phase(self, name: str) -> None:
        """Show the phase with an indeterminate bar."""
        self.bar.update(self.task, description=name, completed=0, total=None)

    def step(self, done: int, total: int, what: str) -> None:
        """Advance the bar to Ninja's ``done``/``total``."""
        self.bar.update(self.task, completed=done, total=total, description=_short(what))
        pct = 100 * done // max(total, 1)
        if self.plain_every and (pct >= self.last_pct + self.plain_every or done == total):
            self.last_pct = pct
            self.console.print(f"compile [{done}/{total}] {pct}%", markup=False, highlight=False)

    def failed(self, what: str, log: Path, tail: list[str]) -> None:
        """Print what failed, the log's path and its last lines."""
        self.console.print(f"[red]{what} failed[/red]; full log: {log}")
        self.console.print("\n".join(tail), markup=False, highlight=False)


def _short(step: str, width: int = 48) -> str:
    """The interesting tail of a Ninja step (``Building CXX object .../server-http.cpp.o``)."""
    what = step.rsplit("/", 1)[-1] if "/" in step else step
    return what[-width:]
