"""Every models.yaml key that becomes a llama-server flag, what the plan passes for it, and what
llama-server does when the key is left out.

A key left out of models.yaml leaves its flag off the command line, so llama-server's own default
applies; ``launch_settings`` names that default as the binary's ``--help`` states it
(``ServerCapabilities.default``), never as we remember it, so ``up --dry-run`` and ``status`` show
what will really run. ``orchestrator.supervise.effective`` reads back what llama-server reports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.launch.argv import ServerArgs, Speculation


@dataclass(frozen=True)
class LaunchSetting:
    """One key: ``asked`` is the value the command line passes (None: the flag is left out),
    ``default`` llama-server's default for it per ``--help`` (None: the help names none)."""

    key: str
    flag: str
    asked: str | None
    default: str | None

    def line(self) -> str:
        """``"batch_size 4096"`` or ``"batch_size: llama-server's default (2048)"``."""
        if self.asked is not None:
            return f"{self.key} {self.asked}"
        return f"{self.key}: llama-server's default ({self.default or 'unstated'})"


def _spec(get: Callable[[Speculation], object]) -> Callable[[ServerArgs], object]:
    return lambda a: get(a.speculation) if a.speculation is not None else None


def _on_off(value: bool | None) -> str | None:
    return None if value is None else ("enabled" if value else "disabled")


#: (models.yaml key, the flag's spelling in --help, the value the plan passes) for every key that
#: becomes a flag; ``--help`` prints the default of each (common/arg.cpp).
KEYS: tuple[tuple[str, str, Callable[[ServerArgs], object]], ...] = (
    ("ctx_size", "--ctx-size", lambda a: a.ctx_size),
    ("parallel", "--parallel", lambda a: a.parallel),
    ("threads", "--threads", lambda a: a.threads),
    ("batch_size", "--batch-size", lambda a: a.batch_size),
    ("ubatch_size", "--ubatch-size", lambda a: a.ubatch_size),
    ("cache_type_k", "--cache-type-k", lambda a: a.cache_type_k),
    ("cache_type_v", "--cache-type-v", lambda a: a.cache_type_v),
    ("cache_ram", "--cache-ram", lambda a: a.cache_ram),
    ("speculative.n_max", "--spec-draft-n-max", _spec(lambda s: s.n_max)),
    ("speculative.n_min", "--spec-draft-n-min", _spec(lambda s: s.n_min)),
    ("speculative.p_min", "--spec-draft-p-min", _spec(lambda s: None if s.p_min is None else f"{s.p_min:g}")),
    ("speculative.backend_sampling", "--spec-draft-backend-sampling", _spec(lambda s: _on_off(s.backend_sampling))),
    ("speculative.draft", "--spec-draft-model", _spec(lambda s: s.draft)),
    ("preserve_thinking", "--reasoning-preserve", lambda a: _preserve(a)),
    ("mmproj", "--mmproj", lambda a: a.mmproj),
)


def _preserve(args: ServerArgs) -> str | None:
    """``preserve_thinking`` as passed: ``--no-reasoning-preserve``, or the template kwargs that keep it."""
    if args.reasoning_preserve is not None:
        return _on_off(args.reasoning_preserve)
    return f"enabled (--chat-template-kwargs {args.template_kwargs})" if args.template_kwargs else None


_SPECULATIVE = "speculative."


def flag_defaults(default: Callable[[str], str | None]) -> tuple[tuple[str, str], ...]:
    """``(flag, default)`` of every flag of ``KEYS`` whose default ``default`` (``ServerCapabilities.default``:
    read from ``--help``) states; what an ``InstanceSpec`` carries for ``launch_settings``."""
    found = ((flag, default(flag)) for _key, flag, _get in KEYS)
    return tuple((flag, value) for flag, value in found if value is not None)


def launch_settings(server: ServerArgs, defaults: tuple[tuple[str, str], ...]) -> list[LaunchSetting]:
    """Each key of ``KEYS`` for this command line (the draft's keys only when it drafts), with
    llama-server's default from ``defaults`` (``flag_defaults``)."""
    known = dict(defaults)
    out = []
    for key, flag, get in KEYS:
        if key.startswith(_SPECULATIVE) and server.speculation is None:
            continue
        value = get(server)
        out.append(LaunchSetting(key, flag, None if value is None else str(value), known.get(flag)))
    return out


def defaults_line(settings: list[LaunchSetting]) -> str | None:
    """``"left to llama-server's defaults: threads 2, batch_size 2048, ..."``; None when every key is set."""
    left = [f"{s.key} {s.default or '(unstated)'}" for s in settings if s.asked is None]
    return "left to llama-server's defaults (its --help): " + ", ".join(left) if left else None
