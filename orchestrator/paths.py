"""Where the orchestrator keeps things outside the repository.

- cache root: downloads, extracted pinned sources, native builds, generated demo models.
  ``$ORCHESTRATOR_CACHE`` or ``$XDG_CACHE_HOME/orchestrator`` or ``~/.cache/orchestrator``.
- saved prompt caches (``kv_persist``): ``$ORCHESTRATOR_KV`` or ``<cache root>/kv``.
- state dir: what a running ``orchestrator up`` publishes for ``status``/``logs``/``down``
  (pid file, status JSON, per-instance logs). ``$ORCHESTRATOR_STATE`` or
  ``$XDG_STATE_HOME/orchestrator`` or ``~/.local/state/orchestrator``.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """Return the cache root directory (created on demand by callers)."""
    env = os.environ.get("ORCHESTRATOR_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "orchestrator"


def state_dir() -> Path:
    """Return the directory a running ``orchestrator up`` writes its state and logs into."""
    env = os.environ.get("ORCHESTRATOR_STATE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "orchestrator"


def demo_model_dir() -> Path:
    """Directory holding the generated tiny demo models."""
    return cache_root() / "models"


def kv_root() -> Path:
    """Directory of every model's saved prompt caches (``kv_persist``), one folder per model:
    ``$ORCHESTRATOR_KV`` or ``<cache root>/kv``."""
    env = os.environ.get("ORCHESTRATOR_KV")
    return Path(env).expanduser() if env else cache_root() / "kv"


def kv_dir(model: str) -> Path:
    """Directory of model ``model``'s saved prompt caches (llama-server's ``--slot-save-path``)."""
    return kv_root() / model
