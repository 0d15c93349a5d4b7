"""Drafting on every slot: with ``-np 3`` and requests pinned to a slot (``id_slot``, what prompt
affinity sends), each slot drafts and accepts exactly as slot 0 does, alone or with the other
slots busy, and each honours its own per-request draft length (patch 0002) at the same time."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from native_server import running_server

from orchestrator.models.tiny import write_tiny_model

pytestmark = [pytest.mark.native, pytest.mark.slow]

SLOTS = 3
PROMPT = "The slots all draft the same"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    # q = 0.2: a fifth of the drafts are wrong, so accepted != drafted and both counts must match
    model = write_tiny_model(tmp_path_factory.mktemp("slots") / "echo-q0.2.gguf", mode="echo", q=0.2, seed=0)
    flags = ("-np", str(SLOTS), "-c", str(512 * SLOTS), "--spec-type", "draft-mtp", "--spec-draft-n-max", "3")
    with running_server(model, *flags) as url, httpx.Client(base_url=url, timeout=120.0) as c:
        yield c


def complete(client: httpx.Client, slot: int, n_max: int = 3) -> tuple[str, int, int, int]:
    body = {"prompt": PROMPT, "n_predict": 40, "temperature": 0.0, "cache_prompt": False, "id_slot": slot}
    resp = client.post("/completion", json={**body, "speculative.n_max": n_max})
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["id_slot"] == slot
    t = out["timings"]
    return out["content"], t["predicted_n"], t.get("draft_n", 0), t.get("draft_n_accepted", 0)


def test_each_slot_drafts_and_accepts_like_slot_0(client: httpx.Client) -> None:
    first = complete(client, 0)
    assert first[2] > 0 and 0 < first[3] < first[2]  # drafting on, some drafts rejected
    for slot in range(1, SLOTS):
        assert complete(client, slot) == first, slot


def test_slots_draft_alike_while_all_are_busy(client: httpx.Client) -> None:
    alone = complete(client, 0)
    with ThreadPoolExecutor(SLOTS) as pool:
        together = list(pool.map(lambda s: complete(client, s), range(SLOTS)))
    assert together == [alone] * SLOTS


def test_concurrent_slots_keep_their_own_draft_length(client: httpx.Client) -> None:
    alone = {k: complete(client, 0, n_max=k) for k in (0, 1, 3)}
    assert alone[0][2] == 0 and alone[1][2] > 0 and alone[3][2] > alone[1][2]
    with ThreadPoolExecutor(SLOTS) as pool:
        together = list(pool.map(lambda sk: complete(client, *sk), [(0, 3), (1, 1), (2, 0)]))
    assert together == [alone[3], alone[1], alone[0]]
