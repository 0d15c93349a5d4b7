"""Prompt-cache persistence fails soft (real llama-servers through the lifecycle and the proxy):

- a read-only KV folder (a read-only tmpfs) and a full one (a tmpfs with no room left) turn
  persistence off for the model with a warning in ``/status``; the model loads, serves, unloads
  and loads again, and no partial file is left behind;
- once the full disk has room again, persistence resumes at the next save or load (tried at most
  every ``RETRY_S``), and ``/status`` says when it went off and when it came back;
- a slot filled to the end of its context is saved and restored like any other;
- an unload with a stream still running honours ``server.timeouts.drain``: the busy slot is not
  waited for;
- after an unplanned crash (``kill -9`` of llama-server) the last idle save is restored.

The mounts need root (``mount -t tmpfs``); without it those tests are skipped.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kv_helpers import long_text
from scheduler_helpers import lifecycle_stack, tiny_models, wait_until

from orchestrator.config.schema import Timeouts
from orchestrator.host import disk
from orchestrator.serve.cache import prompt_cache
from orchestrator.supervise import kv_state

pytestmark = [pytest.mark.slow, pytest.mark.native]


@pytest.fixture
def kv_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = tmp_path / "kv"
    monkeypatch.setenv("ORCHESTRATOR_KV", str(root))
    disk.clear()
    yield root
    disk.clear()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, pinned_source: Path) -> list[Path]:
    return tiny_models(tmp_path_factory.mktemp("kvfail"), 1)


@contextlib.contextmanager
def tmpfs(folder: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted on ``folder`` with ``options`` (skips the test without the right to mount)."""
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _post(url: str, path: str, body: dict[str, Any], timeout: float = 300) -> dict[str, Any]:
    r = httpx.post(url + path, json=body, timeout=timeout)
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def _row(url: str, model: str) -> dict[str, Any]:
    rows = httpx.get(url + "/status", timeout=30).json()["models"]
    row: dict[str, Any] = next(r for r in rows if r["model"] == model)
    return row


def _serves_and_cycles(url: str) -> None:
    """The model answers, unloads and loads again (each step bounded, never a hang)."""
    prompt = long_text("doc", 100)
    assert _post(url, "/v1/completions", {"model": "a", "prompt": prompt, "max_tokens": 4}, timeout=120)["choices"]
    _post(url, "/models/unload", {"model": "a"}, timeout=120)
    _post(url, "/models/load", {"model": "a"}, timeout=120)
    assert _post(url, "/v1/completions", {"model": "a", "prompt": prompt, "max_tokens": 1}, timeout=120)["choices"]


@pytest.mark.parametrize("mode", ["0700", "1777"])
def test_a_read_only_kv_folder_turns_persistence_off(
    tmp_path: Path, kv_root: Path, bin_info: Any, tiny: list[Path], mode: str
) -> None:
    """Mode 0700: the folder looks right and llama-server's save fails; 1777: even making it
    private fails. Either way the model loads and serves, without persistence."""
    with tmpfs(kv_root / "a", f"ro,mode={mode},size=1m"):
        stack = lifecycle_stack(tmp_path, bin_info, [{"name": "a", "path": str(tiny[0]), "ctx_size": 4096}])
        try:
            _post(stack.url, "/models/load", {"model": "a"}, timeout=120)
            _serves_and_cycles(stack.url)
            row = _row(stack.url, "a")
            assert row["state"] == "ready"
            assert row["kv"]["enabled"] is False
            assert "kv_persist turned off" in row["kv"]["warning"]
            assert row["kv"]["saved"] == 0
            faults = httpx.get(stack.url + "/status", timeout=30).json()["disk"]
            assert [f["error"] for f in faults if "prompt caches of a" in f["what"]] == [os.strerror(errno.EROFS)]
        finally:
            stack.close()


def test_a_full_kv_folder_turns_persistence_off_and_leaves_no_partial_file(
    tmp_path: Path, kv_root: Path, bin_info: Any, tiny: list[Path]
) -> None:
    with tmpfs(kv_root / "a", "mode=0700,size=256k") as folder:
        (folder / "filler").write_bytes(b"\0" * (256 - 16) * 1024)  # 16 KiB left: less than one slot
        stack = lifecycle_stack(tmp_path, bin_info, [{"name": "a", "path": str(tiny[0]), "ctx_size": 4096}])
        try:
            _post(stack.url, "/models/load", {"model": "a"}, timeout=120)
            _serves_and_cycles(stack.url)
            kv = _row(stack.url, "a")["kv"]
            assert kv["enabled"] is False and "kv_persist turned off" in kv["warning"], kv
            assert sorted(p.name for p in folder.iterdir()) == ["filler"]
            faults = httpx.get(stack.url + "/status", timeout=30).json()["disk"]
            assert [f["error"] for f in faults if "prompt caches of a" in f["what"]] == [os.strerror(errno.ENOSPC)]
        finally:
            stack.close()


def _cycle(url: str) -> None:
    """Load, one request, unload (a save, and at the load a restore)."""
    _post(url, "/models/load", {"model": "a"}, timeout=120)
    assert _post(url, "/v1/completions", {"model": "a", "prompt": long_text("doc", 100), "max_tokens": 2})
    _post(url, "/models/unload", {"model": "a"}, timeout=120)


def _kv_fault(url: str) -> dict[str, Any] | None:
    faults = httpx.get(url + "/status", timeout=30).json()["disk"]
    return next((f for f in faults if f["what"] == "saved prompt caches of a"), None)


def test_a_full_kv_folder_resumes_persistence_once_space_returns(
    tmp_path: Path, kv_root: Path, bin_info: Any, tiny: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """It stayed off for the rest of the run. Now: a still-full disk is tried without a failing
    save, a try comes at most every RETRY_S, and once the filler is gone the next save resumes."""
    monkeypatch.setattr(prompt_cache, "IDLE_SAVE_S", 1e9)  # only the unloads save: no try at a random time
    monkeypatch.setattr(kv_state, "RETRY_S", 3600.0)
    with tmpfs(kv_root / "a", "mode=0700,size=256k") as folder:
        filler = folder / "filler"
        filler.write_bytes(b"\0" * (256 - 16) * 1024)  # 16 KiB left: less than one slot
        stack = lifecycle_stack(tmp_path, bin_info, [{"name": "a", "path": str(tiny[0]), "ctx_size": 4096}])
        try:
            _cycle(stack.url)
            off = _row(stack.url, "a")["kv"]
            assert off["enabled"] is False and off["turned_off_at"] and off["resumed_at"] is None, off
            assert "kv_persist turned off" in off["warning"]
            monkeypatch.setattr(kv_state, "RETRY_S", 0.0)
            tries = _kv_fault(stack.url)["count"]  # type: ignore[index]
            _cycle(stack.url)  # still full: tried at the load and at the save, without writing a slot
            still = _row(stack.url, "a")["kv"]
            assert (still["enabled"], still["saved"], still["turned_off_at"]) == (False, 0, off["turned_off_at"])
            assert _kv_fault(stack.url)["count"] == tries + 2  # type: ignore[index]
            filler.unlink()
            monkeypatch.setattr(kv_state, "RETRY_S", 3600.0)
            _cycle(stack.url)  # room again, but the last try was just now: not yet
            assert _row(stack.url, "a")["kv"]["enabled"] is False
            monkeypatch.setattr(kv_state, "RETRY_S", 0.0)
            _cycle(stack.url)  # resumed at the load, saved at the unload
            kv = _row(stack.url, "a")["kv"]
            assert (kv["enabled"], kv["warning"], kv["saved"]) == (True, None, 1), kv
            assert kv["turned_off_at"] == off["turned_off_at"] < kv["resumed_at"] <= time.time(), kv
            assert _kv_fault(stack.url) is None
            assert len(list(folder.glob("*.bin"))) == 1
            _post(stack.url, "/models/load", {"model": "a"}, timeout=120)
            assert _row(stack.url, "a")["kv"]["restored"] == 1
        finally:
            stack.close()


def test_a_slot_at_the_end_of_its_context_is_saved_and_restored(
    tmp_path: Path, kv_root: Path, bin_info: Any, tiny: list[Path]
) -> None:
    stack = lifecycle_stack(tmp_path, bin_info, [{"name": "a", "path": str(tiny[0]), "ctx_size": 1024}])
    try:
        prompt = long_text("doc", 120)  # about 780 tokens; the answer runs into the end of the context
        out = _post(stack.url, "/v1/completions", {"model": "a", "prompt": prompt, "max_tokens": 2000})
        assert out["usage"]["prompt_tokens"] + out["usage"]["completion_tokens"] >= 1023, out["usage"]
        _post(stack.url, "/models/unload", {"model": "a"})
        _post(stack.url, "/models/load", {"model": "a"})
        kv = _row(stack.url, "a")["kv"]
        assert (kv["saved"], kv["restored"], kv["enabled"], kv["warning"]) == (1, 1, True, None), kv
        again = _post(stack.url, "/v1/completions", {"model": "a", "prompt": prompt, "max_tokens": 1})
        assert again["timings"]["cache_n"] >= out["usage"]["prompt_tokens"] - 64, again["timings"]
    finally:
        stack.close()


def test_an_unload_does_not_wait_for_a_running_stream_past_the_drain_timeout(
    tmp_path: Path, kv_root: Path, bin_info: Any, tiny: list[Path]
) -> None:
    server = {"timeouts": Timeouts(load=120, keepalive=0.05, queue=120, drain=1)}
    model = {"name": "a", "path": str(tiny[0]), "ctx_size": 32768, "allow_ctx_beyond_trained": True}
    stack = lifecycle_stack(tmp_path, bin_info, [model], server=server)
    try:
        _post(stack.url, "/v1/completions", {"model": "a", "prompt": long_text("doc", 100), "max_tokens": 1})
        chunks: list[bytes] = []
        body = {"model": "a", "prompt": "count", "max_tokens": 30000, "stream": True, "ignore_eos": True}

        def stream() -> None:
            with (
                contextlib.suppress(httpx.HTTPError),
                httpx.stream("POST", stack.url + "/v1/completions", json=body, timeout=600) as r,
            ):
                chunks.extend(r.iter_bytes())

        reader = threading.Thread(target=stream, daemon=True)
        reader.start()
        wait_until("the stream to run", lambda: len(chunks) > 5)
        started = time.monotonic()
        _post(stack.url, "/models/unload", {"model": "a"}, timeout=120)
        took = time.monotonic() - started
        reader.join(timeout=60)
        kv = _row(stack.url, "a")["kv"]
        assert took < 20, f"the unload took {took:.1f} s with drain 1 s"
        assert kv["busy_skipped"] >= 1, kv
    finally:
        stack.close()


def test_after_a_crash_the_last_idle_save_is_restored(
    tmp_path: Path, kv_root: Path, bin_info: Any, tiny: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prompt_cache, "IDLE_SAVE_S", 0.5)
    monkeypatch.setattr(prompt_cache, "IDLE_SAVE_EVERY_S", 0.0)
    stack = lifecycle_stack(tmp_path, bin_info, [{"name": "a", "path": str(tiny[0]), "ctx_size": 4096}])
    try:
        prefix = long_text("doc")
        first = _post(stack.url, "/v1/completions", {"model": "a", "prompt": prefix, "max_tokens": 1})
        wait_until("an idle save", lambda: _row(stack.url, "a")["kv"]["saved"] == 1, timeout=60, every=0.2)
        (inst,) = stack.supervisor.for_model("a")
        pid = inst.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_until("a restore after the restart", lambda: _row(stack.url, "a")["kv"]["crash_restores"] == 1, 120, 0.2)
        assert inst.pid != pid
        again = _post(stack.url, "/v1/completions", {"model": "a", "prompt": prefix + " and then", "max_tokens": 1})
        assert again["timings"]["cache_n"] >= first["timings"]["prompt_n"], again["timings"]
    finally:
        stack.close()
