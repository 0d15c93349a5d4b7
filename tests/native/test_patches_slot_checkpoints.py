"""Patch 0003 (native/patches/0003-slot-save-checkpoints.patch): a slot save file carries the
slot's context checkpoints and the draft's state, so a fresh llama-server that restores it rolls
back to a checkpoint exactly as the uninterrupted one does.

The tiny ``qwen35moe`` models are hybrid (gated delta-net layers beside attention): without a
checkpoint the recurrent state cannot roll back, and a next prompt that does not extend every
saved token (a chat turn re-rendering the previous answer) re-processes everything. Each test
compares a fresh server restoring the file with the server that saved it, on the same next
prompt: the tokens taken from the cache, the greedy text and the drafting figures must be equal.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kv_helpers import long_text
from native_server import running_server

from orchestrator.models.tiny import write_tiny_model
from orchestrator.supervise.kv_files import read_tokens

pytestmark = [pytest.mark.native, pytest.mark.slow]

MAGIC = b"SLCK"  # 0x4b434c53 little-endian: the trailer after the sequence state
FLAGS = ("-c", "4096", "--spec-type", "draft-mtp", "--spec-draft-n-max", "3")


@pytest.fixture(scope="module", params=["random", "echo"])
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, pinned_source: Path) -> Path:
    """A random model (its output depends on all its context) and an echo one with draft
    acceptance 0.8 (the drafting figures are not trivially zero)."""
    mode = str(request.param)
    q = 0.2 if mode == "echo" else 0.0
    return write_tiny_model(tmp_path_factory.mktemp("slotckpt") / f"{mode}.gguf", mode=mode, q=q, seed=3)


@pytest.fixture
def saves(tmp_path: Path) -> Path:
    folder = tmp_path / "slots"
    folder.mkdir()
    return folder


def _server(model: Path, saves: Path) -> Any:
    return running_server(model, *FLAGS, "--slot-save-path", str(saves))


@pytest.fixture
def client_factory() -> Iterator[Any]:
    clients: list[httpx.Client] = []

    def make(url: str) -> httpx.Client:
        clients.append(httpx.Client(base_url=url, timeout=300.0, trust_env=False))
        return clients[-1]

    yield make
    for c in clients:
        c.close()


def _complete(client: httpx.Client, prompt: str | list[int], n_predict: int) -> dict[str, Any]:
    body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "cache_prompt": True, "id_slot": 0}
    resp = client.post("/completion", json=body)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def _slot(client: httpx.Client, action: str, name: str) -> httpx.Response:
    return client.post(f"/slots/0?action={action}", json={"filename": name})


FIRST = long_text("turn")  # about 1,700 tokens
SECOND = FIRST + " but the next turn re-renders the answer differently and asks again"


def _figures(out: dict[str, Any]) -> tuple[Any, ...]:
    t = out["timings"]
    return out["content"], t["cache_n"], t["prompt_n"], t.get("draft_n", 0), t.get("draft_n_accepted", 0)


def test_restored_checkpoints_roll_back_like_the_live_server(model: Path, saves: Path, client_factory: Any) -> None:
    with _server(model, saves) as url:
        live = client_factory(url)
        _complete(live, FIRST, 16)  # the slot holds the prompt and 16 generated tokens
        saved = _slot(live, "save", "turn.bin").json()
        assert saved["n_checkpoints"] >= 1
        expected = _complete(live, SECOND, 24)
    n_prompt = expected["timings"]["cache_n"] + expected["timings"]["prompt_n"]
    # live, the server rolls back to the checkpoint a few tokens before the first prompt's end
    assert 1500 <= expected["timings"]["cache_n"] < n_prompt
    with _server(model, saves) as url:
        fresh = client_factory(url)
        restored = _slot(fresh, "restore", "turn.bin").json()
        assert restored["n_checkpoints"] == saved["n_checkpoints"]
        assert restored["n_restored"] == saved["n_saved"]
        again = _complete(fresh, SECOND, 24)
    assert _figures(again) == _figures(expected)


def test_a_file_in_the_old_layout_restores_without_checkpoints(model: Path, saves: Path, client_factory: Any) -> None:
    with _server(model, saves) as url:
        live = client_factory(url)
        _complete(live, FIRST, 16)
        assert _slot(live, "save", "turn.bin").status_code == 200
        data = (saves / "turn.bin").read_bytes()
        (saves / "old.bin").write_bytes(data[: data.index(MAGIC)])  # what an unpatched server writes
        (saves / "damaged.bin").write_bytes(data[: data.index(MAGIC) + 10])
        restored = _slot(live, "restore", "old.bin")
        assert restored.status_code == 200, restored.text
        assert restored.json()["n_checkpoints"] == 0
        # a prompt extending every restored token is served from the cache, as before the patch
        tokens = list(read_tokens(saves / "old.bin"))
        assert len(tokens) == restored.json()["n_restored"] > 1500
        out = _complete(live, [*tokens, tokens[-1]], 1)
        assert out["timings"]["cache_n"] == len(tokens)
        damaged = _slot(live, "restore", "damaged.bin")
        assert damaged.status_code == 400
        assert "checkpoints" in damaged.text
        assert client_factory(url).get("/health").status_code == 200
