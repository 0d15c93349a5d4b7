"""Hot reload and discovery through the real ``orchestrator up``: a changed ``ctx_size`` restarts
only that model, one replica at a time; an invalid edit keeps the running config and reports the
located error (log, ``GET /status``, ``orchestrator reload``'s exit status); SIGHUP reloads;
a change of ``server.port`` is refused; ``models_dirs`` serves a GGUF by its file name."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from scheduler_helpers import tiny_models, wait_until
from supervision_helpers import RunningUp

pytestmark = [pytest.mark.native, pytest.mark.slow]

HEAD = "server:\n  host: 127.0.0.1\n  port: 0\n  timeouts: {load: 120, shutdown_grace: 30, drain: 30}\n"


def _yaml(a: Path, b: Path, ctx_a: int = 512) -> str:
    return (
        HEAD + "models:\n"
        f"  - {{name: a, path: {a}, ctx_size: {ctx_a}, threads: 1, replicas: 2}}\n"
        f"  - {{name: b, path: {b}, ctx_size: 512, threads: 1}}\n"
    )


def _status(up: RunningUp) -> dict[str, Any]:
    r = httpx.get(f"{up.run['endpoint']}/status", timeout=10, trust_env=False)
    assert r.status_code == 200
    doc: dict[str, Any] = r.json()
    return doc


def _pids(up: RunningUp) -> dict[str, int | None]:
    return {row["name"]: row["pid"] for row in _status(up)["instances"]}


def _chat(up: RunningUp, model: str) -> int:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    return httpx.post(f"{up.run['endpoint']}/v1/chat/completions", json=body, timeout=120, trust_env=False).status_code


def test_reload_restarts_only_the_changed_model_one_replica_at_a_time_and_keeps_serving_on_errors(
    tmp_path: Path, bin_info: object, pinned_source: Path
) -> None:
    a, b = tiny_models(tmp_path / "models", 2)
    config = tmp_path / "models.yaml"
    config.write_text(_yaml(a, b))
    with RunningUp(config, tmp_path / "state", until="health") as up:
        before = _pids(up)
        assert all(before.values()) and set(before) == {"a-0", "a-1", "b-0"}

        config.write_text(_yaml(a, b, ctx_a=1024))  # the watcher sees it
        seen: list[dict[str, int | None]] = []

        def rolled() -> bool:
            now = _pids(up)
            seen.append(now)
            return all(now[n] and now[n] != before[n] for n in ("a-0", "a-1"))

        wait_until("both replicas of a to restart", rolled, timeout=120, every=0.05)
        assert all(s["b-0"] == before["b-0"] for s in seen)  # the other model kept its pid throughout
        # one replica at a time: while a-0 had its new pid, a-1 still had its old one
        assert any(s["a-0"] not in (None, before["a-0"]) and s["a-1"] == before["a-1"] for s in seen), seen
        now = _pids(up)
        for name in ("a-0", "a-1"):
            argv = psutil.Process(now[name]).cmdline()
            assert argv[argv.index("-c") + 1] == "1024"
        assert _chat(up, "a") == 200 and _chat(up, "b") == 200

        # an invalid edit: still serving, the located error in the log, /status and `reload`'s exit status
        config.write_text(_yaml(a, b).replace("ctx_size: 512, threads: 1}\n", "ctx_size: lots, threads: 1}\n"))
        wait_until("the watcher to report the bad edit", lambda: _status(up)["config_error"], timeout=60)
        error = _status(up)["config_error"]
        assert "models.yaml:" in error and "ctx_size" in error
        result = up.cli("reload")
        assert result.returncode == 1 and "ctx_size" in result.stderr
        assert _chat(up, "b") == 200 and _pids(up)["b-0"] == before["b-0"]
        wait_until("the refusal in up's log", lambda: "reload (file changed) refused" in up.out.read_text())

        # SIGHUP after a fix reloads and clears the error; a port change needs a restart
        config.write_text(_yaml(a, b, ctx_a=1024))
        os.kill(up.proc.pid, signal.SIGHUP)  # type: ignore[union-attr]
        wait_until("the fixed file to be taken", lambda: _status(up)["config_error"] is None, timeout=60)
        config.write_text(_yaml(a, b, ctx_a=1024).replace("port: 0", "port: 1"))
        refused = up.cli("reload")
        assert refused.returncode == 1 and "server.port" in refused.stderr
        assert _pids(up)["b-0"] == before["b-0"]

        # an alias changes in place, a removed model stops, an added one follows its load mode
        a_pids = {n: p for n, p in _pids(up).items() if n.startswith("a-")}
        config.write_text(
            HEAD + "models:\n"
            f"  - {{name: a, path: {a}, ctx_size: 1024, threads: 1, replicas: 2, aliases: [alpha]}}\n"
            f"  - {{name: c, path: {b}, ctx_size: 512, threads: 1, load: on_demand}}\n"
        )
        reloaded = up.cli("reload")
        summary = "added c; removed b; updated a"
        # either this reload applied it, or the file watcher was first and `reload` says what it applied
        assert reloaded.returncode == 0 and summary in reloaded.stdout.replace("\n", " "), reloaded.stdout
        wait_until("the reload summary in up's log", lambda: summary in up.out.read_text().replace("\n", " "))
        ids = {m["id"]: m for m in httpx.get(f"{up.run['endpoint']}/v1/models", trust_env=False).json()["data"]}
        assert set(ids) == {"a", "alpha", "c"} and ids["c"]["state"] == "unloaded"
        assert {n: p for n, p in _pids(up).items() if n.startswith("a-")} == a_pids  # an alias: no restart
        wait_until("b's server to be gone", lambda: not psutil.pid_exists(before["b-0"]) or _zombie(before["b-0"]))
        assert _chat(up, "alpha") == 200 and _chat(up, "b") == 404
        assert _chat(up, "c") == 200, up.out.read_text()[-3000:]


def _zombie(pid: int | None) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_models_dirs_serves_a_gguf_by_its_file_name_with_its_separate_mtp_head(
    tmp_path: Path, bin_info: object, pinned_source: Path
) -> None:
    from orchestrator.models.tiny import write_tiny_model

    folder = tmp_path / "lmstudio" / "publisher"
    write_tiny_model(folder / "beta-Q8_0.gguf", mode="echo", variant="separate")  # + beta-Q8_0.draft.gguf
    (folder / "mmproj-beta-F16.gguf").write_bytes((folder / "beta-Q8_0.gguf").read_bytes())  # a projector
    (folder / "notes.txt").write_text("not a model")
    config = tmp_path / "models.yaml"
    config.write_text(HEAD + f"models_dirs: [{tmp_path / 'lmstudio'}]\n")
    with RunningUp(config, tmp_path / "state", until="health") as up:
        models = httpx.get(f"{up.run['endpoint']}/v1/models", timeout=10, trust_env=False).json()["data"]
        assert [m["id"] for m in models] == ["beta-Q8_0"] and models[0]["state"] == "unloaded"
        assert _chat(up, "beta-Q8_0") == 200  # loaded on demand
        pid = _pids(up)["beta-Q8_0-0"]
        argv = psutil.Process(pid).cmdline()
        assert argv[argv.index("-md") + 1].endswith("beta-Q8_0.draft.gguf")
        assert "--spec-type" in argv
        rows = json.loads(up.cli("ps", "--json").stdout)["models"]
        assert rows[0]["model"] == "beta-Q8_0" and rows[0]["load"] == "on_demand"


def test_scan_rules_on_names(tmp_path: Path) -> None:
    """Split parts count once under the name before -00001-of-N; unsafe characters become '-'."""
    from orchestrator.launch.discover import _candidates, model_name

    for name in ("Big-Model-00001-of-00002.gguf", "Big-Model-00002-of-00002.gguf", "x y+z.GGUF", "readme.md"):
        (tmp_path / name).write_bytes(b"")
    names = [model_name(p) for p in _candidates(tmp_path)]
    assert names == ["Big-Model", "x-y-z"]


def test_twenty_sighups_give_at_most_two_reloads_and_sigterm_during_a_backlog_exits_within_the_grace(
    tmp_path: Path, bin_info: object, pinned_source: Path
) -> None:
    a, b = tiny_models(tmp_path / "models", 2)
    config = tmp_path / "models.yaml"
    text = _yaml(a, b).replace("shutdown_grace: 30", "shutdown_grace: 10")
    config.write_text(text)
    with RunningUp(config, tmp_path / "state", until="health") as up:
        assert up.proc is not None
        for _ in range(20):
            os.kill(up.proc.pid, signal.SIGHUP)

        def reloads() -> int:
            return up.out.read_text().count("(SIGHUP): ")

        wait_until("the first reload", reloads, timeout=60)
        seen = [reloads()]
        deadline = time.monotonic() + 5  # anything still pending runs well within this
        while time.monotonic() < deadline:
            seen.append(reloads())
            time.sleep(0.2)
        assert 1 <= seen[-1] <= 2, up.out.read_text()[-3000:]

        # a backlog again (signals and edits), then SIGTERM: the backlog is dropped, `up` exits
        for i in range(20):
            os.kill(up.proc.pid, signal.SIGHUP)
            if i % 5 == 0:
                config.write_text(text + f"# edit {i}\n")
        started = time.monotonic()
        up.proc.send_signal(signal.SIGTERM)
        up.proc.wait(timeout=60)
        assert time.monotonic() - started < 10, up.out.read_text()[-3000:]
        assert up.proc.returncode == 0
