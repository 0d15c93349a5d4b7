"""Prompt-cache persistence on real llama-server processes (tiny qwen35moe models, 4,096-token context).

- save before a stop, restore (verified) on the next start of the same model and flags, and the
  next request with the same prefix reports it cached;
- a file written for another model or other KV flags is never restored (a fresh
  ``KvPersistence``, as after ``kill -9`` of everything, included);
- a truncated or altered file is skipped with a warning, deleted, and nothing crashes;
- a restore that does not verify turns persistence off for the model;
- a slot holding an image is saved and restored (its media positions are LLAMA_TOKEN_NULL), and
  the same question with the same image after the restore is served from it;
- at the pin, save/restore carries the gated delta-net recurrent state (greedy continuation and
  log-probabilities after a restore equal the uninterrupted server's).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from kv_helpers import complete, kv_spec, long_text, run_async, started
from supervision_helpers import make_config

from orchestrator.models.facts import read_model_facts
from orchestrator.models.memory import estimate_memory
from orchestrator.models.tiny import write_tiny_model
from orchestrator.native.build import BuildInfo
from orchestrator.supervise.kv_files import KvStore, read_tokens
from orchestrator.supervise.kv_persist import KvPersistence
from orchestrator.supervise.slot_client import SlotClient

pytestmark = [pytest.mark.slow, pytest.mark.native]

# a 1x1 red PNG
RED_PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
        "0000000c4944415478da63f8cfc0000003010100c9fe92ef0000000049454e44ae426082"
    )
).decode()


@pytest.fixture(scope="module")
def random_model(tmp_path_factory: pytest.TempPathFactory, pinned_source: Path) -> Path:
    """A tiny qwen35moe with seeded random weights: its output depends on all of its context."""
    path = tmp_path_factory.mktemp("kvrandom") / "random.gguf"
    write_tiny_model(path, mode="random", seed=1)
    return path


def _persistence(root: Path, budget: int = 1 << 30) -> KvPersistence:
    return KvPersistence(KvStore(root, budget), make_config().models)


@run_async
async def test_save_then_restore_reports_the_prefix_cached(
    bin_info: BuildInfo, demo_model: Path, tmp_path: Path
) -> None:
    root = tmp_path / "kv"
    kv = _persistence(root)
    model = make_config().models[0]
    spec = kv_spec(bin_info, demo_model, root / model.name)
    first = await started(spec, tmp_path)
    try:
        assert first.base_url is not None
        prefix = long_text("doc")
        warm = await complete(first.base_url, prefix)
        n_prefix = warm["timings"]["prompt_n"]
        assert n_prefix >= 1500
        await kv.save(model, [first], "unload")
    finally:
        await first.stop(5.0)
    files = sorted((root / model.name).glob("*.bin"))
    assert len(files) == 1 and (files[0].stat().st_mode & 0o777) == 0o600
    assert len(read_tokens(files[0])) == n_prefix

    kv = _persistence(root)  # a new process: nothing in memory
    second = await started(spec, tmp_path)
    try:
        assert second.base_url is not None
        await kv.restore(model, [second])
        st = kv.model(model.name)
        assert (st.restored, st.verify_failures, st.enabled, st.warning) == (1, 0, True, None)
        assert st.last_restore_s is not None
        answer = await complete(second.base_url, prefix + " and then the question")
        assert answer["timings"]["cache_n"] >= n_prefix, answer["timings"]
        assert answer["timings"]["prompt_n"] < 20
    finally:
        await second.stop(5.0)


@run_async
async def test_files_of_other_flags_or_models_are_never_restored(
    bin_info: BuildInfo, demo_model: Path, random_model: Path, tmp_path: Path
) -> None:
    root = tmp_path / "kv"
    model = make_config().models[0]
    spec = kv_spec(bin_info, demo_model, root / model.name)
    inst = await started(spec, tmp_path)
    try:
        assert inst.base_url is not None
        await complete(inst.base_url, long_text("doc"))
        await _persistence(root).save(model, [inst], "shutdown")
        assert inst.pid is not None
        os.killpg(inst.pid, 9)  # kill -9: whatever happens next starts from the disk alone
        await inst.stop(5.0)
    finally:
        await inst.stop(5.0)
    saved = sorted((root / model.name).glob("*.bin"))
    assert len(saved) == 1
    others = [
        kv_spec(bin_info, demo_model, root / model.name, extra=("--cache-type-k", "f32")),
        kv_spec(bin_info, random_model, root / model.name),
    ]
    for other in others:
        kv = _persistence(root)
        inst = await started(other, tmp_path)
        try:
            assert inst.base_url is not None
            await kv.restore(model, [inst])
            assert kv.model(model.name).restored == 0
            answer = await complete(inst.base_url, long_text("doc") + " more")
            assert answer["timings"]["cache_n"] == 0
        finally:
            await inst.stop(5.0)
    assert sorted((root / model.name).glob("*.bin")) == saved  # left for its own model and flags


@run_async
async def test_corrupt_or_truncated_files_are_skipped_with_a_warning(
    bin_info: BuildInfo, demo_model: Path, tmp_path: Path
) -> None:
    root = tmp_path / "kv"
    model = make_config().models[0]
    spec = kv_spec(bin_info, demo_model, root / model.name)
    inst = await started(spec, tmp_path)
    try:
        assert inst.base_url is not None
        await complete(inst.base_url, long_text("doc"))
        for damage in ("truncate", "flip"):
            await _persistence(root).save(model, [inst], "unload")
            (path,) = (root / model.name).glob("*.bin")
            data = bytearray(path.read_bytes())
            if damage == "truncate":
                path.write_bytes(data[: len(data) // 2])
            else:
                data[len(data) - 100] ^= 0xFF
                path.write_bytes(bytes(data))
            kv = _persistence(root)
            await kv.restore(model, [inst])
            st = kv.model(model.name)
            assert (st.restored, st.skipped, st.enabled) == (0, 1, True), damage
            assert st.warning is not None and "skipped" in st.warning
            assert not path.exists()
        answer = await complete(inst.base_url, "still serving")
        assert answer["content"] is not None
    finally:
        await inst.stop(5.0)


@run_async
async def test_a_file_of_the_older_state_version_is_removed_not_restored(
    bin_info: BuildInfo, demo_model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A slot file from the b11312 pin (``ggsq`` state version 3: no rotation widths in its KV
    state) under the very key this instance restores (an adopted llama-server upgraded in place
    keeps its path) and one under another key are both removed with one log line each, no warning,
    nothing handed to llama-server, and the model serves on."""
    root = tmp_path / "kv"
    model = make_config().models[0]
    spec = kv_spec(bin_info, demo_model, root / model.name)
    inst = await started(spec, tmp_path)
    try:
        assert inst.base_url is not None
        await complete(inst.base_url, long_text("doc"))
        await _persistence(root).save(model, [inst], "unload")
        (path,) = (root / model.name).glob("*.bin")
        old = _as_state_version(path, 3)
        other = old.with_name("0123456789abcdef-cdeadbeef.bin")
        other.write_bytes(old.read_bytes())
        store = KvStore(root, 1 << 30)
        store.commit(other, "another key", json.loads(old.with_suffix(".json").read_text())["tokens"])
        await SlotClient().action(inst.base_url, 0, "erase")
        kv = _persistence(root)
        with caplog.at_level(logging.INFO, logger="orchestrator.kv"):
            await kv.restore(model, [inst])
        st = kv.model(model.name)
        assert (st.restored, st.outdated, st.skipped, st.enabled, st.warning) == (0, 2, 0, True, None)
        lines = [r.getMessage() for r in caplog.records if "slot state version 3" in r.getMessage()]
        assert len(lines) == 2 and all("this build reads 4" in line for line in lines), lines
        assert not list((root / model.name).iterdir())
        answer = await complete(inst.base_url, long_text("doc") + " more")
        assert answer["timings"]["cache_n"] == 0  # nothing was restored into the slot
    finally:
        await inst.stop(5.0)


def _as_state_version(path: Path, version: int) -> Path:
    """Rewrite ``path``'s header to state ``version`` and reseal its sidecar (same key, size, hash
    checks pass): only the version tells it apart."""
    data = bytearray(path.read_bytes())
    data[4:8] = version.to_bytes(4, "little")
    path.write_bytes(bytes(data))
    meta = json.loads(path.with_suffix(".json").read_text())
    KvStore(path.parent.parent, 1 << 30).commit(path, meta["key"], meta["tokens"])
    return path


class _SilentRestore(SlotClient):
    """llama.cpp #26676 injected: a restore answers success but the slot stays empty."""

    async def action(self, base_url: str, slot: int, action: str, filename: str | None = None) -> dict[str, Any]:
        if action == "restore":
            return {"id_slot": slot, "n_restored": 0}
        return await super().action(base_url, slot, action, filename)


@run_async
async def test_a_restore_that_does_not_verify_turns_persistence_off(
    bin_info: BuildInfo, demo_model: Path, tmp_path: Path
) -> None:
    root = tmp_path / "kv"
    model = make_config().models[0]
    inst = await started(kv_spec(bin_info, demo_model, root / model.name), tmp_path)
    try:
        assert inst.base_url is not None
        await complete(inst.base_url, long_text("doc"))
        await _persistence(root).save(model, [inst], "unload")
        await SlotClient().action(inst.base_url, 0, "erase")
        (path,) = (root / model.name).glob("*.bin")
        kv = KvPersistence(KvStore(root, 1 << 30), [model], client=_SilentRestore())
        await kv.restore(model, [inst])
        st = kv.model(model.name)
        assert (st.restored, st.verify_failures, st.enabled) == (0, 1, False)
        assert st.warning is not None and "did not verify" in st.warning
        assert any("did not verify" in w for w in inst.warnings)  # shown by `orchestrator status`
        assert not path.exists()
        await kv.save(model, [inst], "unload")  # off: nothing is saved any more
        assert not list((root / model.name).glob("*.bin"))
    finally:
        await inst.stop(5.0)


@run_async
async def test_a_slot_holding_an_image_is_saved_and_restored(
    bin_info: BuildInfo, echo_model: Path, tmp_path: Path
) -> None:
    """Vision (models.yaml ``mmproj``): the slot's packed tokens hold LLAMA_TOKEN_NULL where the
    image is. Saving it at a stop once raised struct.error; it is filed like any other, keyed by the
    projector too, restored (trusted on ``n_restored``: no token probe can carry an image), and the
    same request afterwards reuses it."""
    from orchestrator.models.tiny_mmproj import write_tiny_mmproj
    from orchestrator.supervise.kv_files import TOKEN_NULL, layout_key

    root = tmp_path / "kv"
    model = make_config().models[0]
    spec = kv_spec(bin_info, echo_model, root / model.name)
    spec = dataclasses.replace(
        spec, server=dataclasses.replace(spec.server, mmproj=write_tiny_mmproj(tmp_path / "p.gguf"))
    )
    other = dataclasses.replace(spec.server, mmproj=write_tiny_mmproj(tmp_path / "q.gguf", seed=1))
    assert layout_key(spec) != layout_key(dataclasses.replace(spec, server=other))
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + RED_PNG}}
    body = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": long_text("doc", 200)}, image]}],
        "max_tokens": 1,
        "temperature": 0,
    }

    async def ask(url: str) -> dict[str, Any]:
        async with httpx.AsyncClient(trust_env=False, timeout=300.0) as client:
            resp = await client.post(f"{url}/v1/chat/completions", json=body)
        resp.raise_for_status()
        return dict(resp.json()["timings"])

    first = await started(spec, tmp_path)
    try:
        assert first.base_url is not None
        n_prompt = (await ask(first.base_url))["prompt_n"]
        await _persistence(root).save(model, [first], "unload")
    finally:
        await first.stop(5.0)
    (saved,) = (root / model.name).glob("*.bin")
    assert TOKEN_NULL in read_tokens(saved)

    kv = _persistence(root)
    second = await started(spec, tmp_path)
    try:
        assert second.base_url is not None
        await kv.restore(model, [second])
        st = kv.model(model.name)
        assert (st.restored, st.verify_failures, st.enabled) == (1, 0, True), st
        again = await ask(second.base_url)
        assert again["cache_n"] >= n_prompt - 8 and again["prompt_n"] <= 8, again
    finally:
        await second.stop(5.0)


@run_async
async def test_recurrent_state_survives_save_and_restore(
    bin_info: BuildInfo, random_model: Path, tmp_path: Path
) -> None:
    """The gated delta-net state is in the file: after a restore, the greedy continuation and every
    top log-probability equal the uninterrupted server's, while changing the prefix's first token
    changes them (so the far context does reach the output)."""
    root = tmp_path / "kv"
    model = make_config().models[0]
    spec = kv_spec(bin_info, random_model, root / model.name)
    prefix = long_text("doc")
    question = " then the final question is what"
    uninterrupted = await started(spec, tmp_path)
    try:
        assert uninterrupted.base_url is not None
        await complete(uninterrupted.base_url, prefix)
        await _persistence(root).save(model, [uninterrupted], "unload")
        base = await complete(uninterrupted.base_url, prefix + question, n_predict=8, n_probs=3)
    finally:
        await uninterrupted.stop(5.0)
    (path,) = (root / model.name).glob("*.bin")
    n_tokens = len(read_tokens(path))
    facts = read_model_facts(random_model)
    need = estimate_memory(facts, n_tokens, 1)
    # beyond the token list and the attention KV, the file has room for the recurrent state
    assert path.stat().st_size - 12 - 4 * (n_tokens + 4) - need.kv_cache >= need.recurrent_state > 0

    kv = _persistence(root)
    restored = await started(spec, tmp_path)
    try:
        assert restored.base_url is not None
        await kv.restore(model, [restored])
        assert kv.model(model.name).restored == 1
        again = await complete(restored.base_url, prefix + question, n_predict=8, n_probs=3)
        other = await complete(restored.base_url, "X" + prefix + question, n_predict=8, n_probs=3)
    finally:
        await restored.stop(5.0)
    assert again["timings"]["cache_n"] == n_tokens
    assert again["content"] == base["content"]
    assert again["completion_probabilities"] == base["completion_probabilities"]
    assert other["completion_probabilities"] != base["completion_probabilities"]
