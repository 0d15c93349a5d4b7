"""The stored Responses (``orchestrator.serve.responses.stored.ResponseStore``) on a real folder:
bounds, expiry, persistence across a restart (B72)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.config.schema import ResponsesStoreConfig
from orchestrator.serve.responses.stored import ResponseStore, input_items


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def response(rid: str, text: str = "A1") -> dict[str, Any]:
    output = [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]
    return {"id": rid, "object": "response", "status": "completed", "output": output}


def store(folder: Path | None, clock: Clock, **settings: Any) -> ResponseStore:
    config = ResponsesStoreConfig(**settings)
    return ResponseStore(folder, lambda: config, clock)


def test_a_stored_response_survives_a_restart_and_continues_its_conversation(tmp_path: Path) -> None:
    clock = Clock()
    first = store(tmp_path, clock)
    assert first.put(response("resp_1"), input_items("U1"), "demo")
    again = store(tmp_path, clock)  # a new endpoint on the same state folder
    found = again.get("resp_1")
    assert found is not None and found.model == "demo" and found.response["id"] == "resp_1"
    assert found.conversation() == [{"role": "user", "content": "U1"}, *response("resp_1")["output"]]
    assert again.delete("resp_1") and again.get("resp_1") is None
    assert not (tmp_path / "resp_1.json").exists() and store(tmp_path, clock).get("resp_1") is None


def test_expired_responses_are_gone_in_memory_and_on_disk(tmp_path: Path) -> None:
    clock = Clock()
    kept = store(tmp_path, clock, ttl=60)
    kept.put(response("resp_old"), [], "demo")
    clock.now += 30
    kept.put(response("resp_new"), [], "demo")
    clock.now += 31  # resp_old is 61 s old, resp_new 31 s
    assert kept.get("resp_old") is None and kept.get("resp_new") is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["resp_new.json"]
    clock.now += 60
    assert store(tmp_path, clock, ttl=60).get("resp_new") is None  # expired while the endpoint was down


def test_the_size_cap_drops_the_oldest_first(tmp_path: Path) -> None:
    clock = Clock()
    one = len(json.dumps({"response": response("resp_0"), "input": [], "model": "demo", "created": clock.now}))
    kept = store(tmp_path, clock, max_bytes=2 * one + one // 2)
    for i in range(3):
        clock.now += 1
        assert kept.put(response(f"resp_{i}"), [], "demo")
    assert [kept.get(f"resp_{i}") is not None for i in range(3)] == [False, True, True]
    assert len(list(tmp_path.glob("*.json"))) == 2
    assert not store(None, clock, max_bytes=0).put(response("resp_x"), [], "demo")  # 0 stores nothing


def test_unreadable_files_and_odd_ids_are_refused(tmp_path: Path) -> None:
    clock = Clock()
    (tmp_path / "resp_bad.json").write_text("{not json")
    kept = store(tmp_path, clock)
    assert kept.get("resp_bad") is None and not (tmp_path / "resp_bad.json").exists()
    assert not kept.put(response("../escape"), [], "demo") and not kept.put({"object": "response"}, [], "demo")
