"""The running config: one validated ``Config`` snapshot that a reload replaces in one step.

Everything that serves reads ``running.current`` when it needs a value (API keys, timeouts,
budgets, model lists, each model's settings), never a copy taken at start: a reload builds a
whole new ``Config``, validates it, and :meth:`RunningConfig.swap` makes it current for the next
reader at once. A snapshot is never edited in place.

What readers derive from a snapshot (a name table, compiled keys) comes from :meth:`derive`,
which rebuilds the value the first time it is read after a swap, so no reader can hold a table
of the previous config.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from orchestrator.config.schema import Config

T = TypeVar("T")


class RunningConfig:
    """The one owner of the config a running ``orchestrator up`` (or app) serves with.

    Args:
        config: the validated config it starts with.
    """

    def __init__(self, config: Config) -> None:
        self._current = config
        self.version = 0  # swaps so far

    @property
    def current(self) -> Config:
        """The snapshot in force now; read it per use, do not keep it."""
        return self._current

    def swap(self, config: Config) -> Config:
        """Make ``config`` (validated, complete) the current snapshot; returns the previous one."""
        old, self._current = self._current, config
        self.version += 1
        return old

    def derive(self, build: Callable[[Config], T]) -> Derived[T]:
        """A reader of ``build(current)``, rebuilt once after each swap."""
        return Derived(self, build)


class Derived(Generic[T]):
    """``build(running.current)``, cached per snapshot: call it to read the value for the current one."""

    __slots__ = ("_build", "_cached", "_running")

    def __init__(self, running: RunningConfig, build: Callable[[Config], T]) -> None:
        self._running = running
        self._build = build
        self._cached: tuple[Config, T] | None = None

    def __call__(self) -> T:
        current = self._running.current
        cached = self._cached
        if cached is None or cached[0] is not current:
            cached = self._cached = (current, self._build(current))
        return cached[1]
