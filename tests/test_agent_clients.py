"""The real agent clients the suite drives: installed at their pinned versions by
``scripts/install_agent_clients.sh`` (the ``agent_clients`` fixture)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.agent_clients import client_env

PINNED = {"claude": "2.1.197", "codex": "0.171.0", "opencode": "1.18.33"}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_pinned_client_runs(agent_clients: Any, name: str, tmp_path: Path) -> None:
    exe = getattr(agent_clients, name)
    out = subprocess.run(
        [str(exe), "--version"], env=client_env(tmp_path), capture_output=True, text=True, timeout=120, check=True
    )
    assert PINNED[name] in out.stdout
