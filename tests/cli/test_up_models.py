"""``orchestrator up`` with the model lifecycle, end to end through the real CLI: on_start and
on_demand models under a memory budget, and ``orchestrator ps``, ``load`` and ``unload``."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from scheduler_helpers import room_for, tiny_models
from supervision_helpers import RunningUp

pytestmark = [pytest.mark.native, pytest.mark.slow]


def _ps(up: RunningUp) -> dict[str, dict[str, object]]:
    result = up.cli("ps", "--json")
    assert result.returncode == 0, result.stderr
    return {row["model"]: row for row in json.loads(result.stdout)["models"]}


def test_up_loads_on_start_models_and_ps_load_unload_steer_the_rest(
    tmp_path: Path, bin_info: object, pinned_source: Path
) -> None:
    a, b = tiny_models(tmp_path / "models", 2)
    config = tmp_path / "models.yaml"
    config.write_text(
        "server:\n  host: 127.0.0.1\n  port: 0\n"
        f"  memory_reserve: 0\n  memory_budget: {{cpu: {room_for(1)}}}\n"
        "  timeouts: {load: 120, shutdown_grace: 30}\n"
        "models:\n"
        f"  - {{name: a, path: {a}, ctx_size: 512, threads: 1}}\n"
        f"  - {{name: b, path: {b}, ctx_size: 512, threads: 1, load: on_demand}}\n"
    )
    with RunningUp(config, tmp_path / "state", until="health") as up:
        endpoint = str(up.run["endpoint"])
        rows = _ps(up)
        assert rows["a"]["state"] == "ready" and rows["b"]["state"] == "unloaded"
        table = up.cli("ps")
        assert table.returncode == 0 and "unloaded" in table.stdout and "host RAM" in table.stdout

        loaded = up.cli("load", "b", timeout=180)
        assert loaded.returncode == 0, loaded.stderr
        rows = _ps(up)
        assert rows["b"]["state"] == "ready" and rows["a"]["state"] == "unloaded"  # room for one: a went

        body = {"model": "a", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        r = httpx.post(f"{endpoint}/v1/chat/completions", json=body, timeout=120, trust_env=False)
        assert r.status_code == 200, r.text  # loaded on demand, b evicted
        assert _ps(up)["b"]["state"] == "unloaded"

        unloaded = up.cli("unload", "a", timeout=120)
        assert unloaded.returncode == 0 and "unloaded" in unloaded.stdout
        missing = up.cli("load", "nope")
        assert missing.returncode == 1 and "does not exist" in missing.stderr
