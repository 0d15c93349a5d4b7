"""Saved slot files without a server: the header reader, the sidecar checks, the LRU disk budget,
and the affinity table's choices."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from orchestrator.supervise.affinity import Replica, SlotHoldings
from orchestrator.supervise.kv_files import (
    STATE_MAGIC,
    STATE_VERSION,
    TOKEN_NULL,
    CorruptState,
    KvStore,
    OutdatedState,
    conv_filename,
    read_tokens,
    same_conversation,
    slot_filename,
    state_id,
)


def _slot_file(
    path: Path, tokens: list[int], state: bytes = b"\x01" * 64, packed: bool = True, version: int = STATE_VERSION
) -> Path:
    body = [TOKEN_NULL, 1, len(tokens), *tokens, 0] if packed else tokens
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack(f"<III{len(body)}i", STATE_MAGIC, version, len(body), *body) + state)
    return path


def test_tokens_are_read_from_packed_and_plain_headers(tmp_path: Path) -> None:
    assert read_tokens(_slot_file(tmp_path / "a.bin", [5, 6, 7])) == (5, 6, 7)
    assert read_tokens(_slot_file(tmp_path / "b.bin", [5, 6, 7], packed=False)) == (5, 6, 7)


def test_a_slot_holding_an_image_is_filed_under_its_conversation(tmp_path: Path) -> None:
    """llama-server writes a media chunk's positions as LLAMA_TOKEN_NULL (-1) in the packed token
    list; the state is read, named and filed like any other (it was a struct.error at shutdown)."""
    tokens = [5, 6, TOKEN_NULL, TOKEN_NULL, TOKEN_NULL, TOKEN_NULL, 7, 8]
    part = _slot_file(tmp_path / "m" / "k-r0-s0.part", tokens)
    assert read_tokens(part) == tuple(tokens)
    saved = KvStore(tmp_path, 1 << 30).adopt(part, "k" * 32)
    assert saved is not None
    assert saved.path.name == conv_filename("k" * 32, state_id(tokens))


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "shorter than the header"),
        (struct.pack("<III", 0x12345678, STATE_VERSION, 0), "not a slot file"),
        (struct.pack("<IIII", STATE_MAGIC, STATE_VERSION, 50, 1), "truncated"),
        (struct.pack("<IIIiII", STATE_MAGIC, STATE_VERSION, 3, TOKEN_NULL, 1, 99), "inconsistent"),
    ],
)
def test_bad_headers_are_corrupt(tmp_path: Path, data: bytes, why: str) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(data)
    with pytest.raises(CorruptState, match=why):
        read_tokens(path)


def test_a_file_of_the_older_state_version_is_outdated_and_dropped(tmp_path: Path) -> None:
    """The b11312 pin wrote state version 3; this pin's llama.cpp writes 4 (its KV state gained the
    rotation widths). A v3 file is ``OutdatedState`` (a ``CorruptState``: never restored) for
    ``check`` under its own key, and ``drop_outdated`` deletes it with its sidecar whatever its key,
    leaving current and merely damaged files to the other checks."""
    assert STATE_VERSION == 4
    store = KvStore(tmp_path, 1 << 20)
    folder = store.model_dir("m")
    old = store.commit(_slot_file(folder / "old.bin", [1, 2], version=3), "key1", 2).path
    other = store.commit(_slot_file(folder / "other.bin", [3], version=3), "another key", 1).path
    current = store.commit(_slot_file(folder / "new.bin", [1, 2, 3]), "key1", 3).path
    damaged = folder / "damaged.bin"
    damaged.write_bytes(b"ggsq")
    with pytest.raises(OutdatedState, match="slot state version 3, this build reads 4") as err:
        store.check(old, "key1")
    assert err.value.version == 3 and isinstance(err.value, CorruptState)
    dropped = store.drop_outdated("m")
    assert [(p, e.version) for p, e in dropped] == [(old, 3), (other, 3)]
    assert sorted(p.name for p in folder.iterdir()) == ["damaged.bin", "new.bin", "new.json"]
    assert store.check(current, "key1") == (1, 2, 3)
    assert store.drop_outdated("m") == []


def test_check_needs_the_same_key_size_and_hash(tmp_path: Path) -> None:
    store = KvStore(tmp_path, 1 << 20)
    path = _slot_file(store.model_dir("m") / "k-r0-s0.bin", [1, 2, 3])
    store.commit(path, "key1", 3)
    assert (path.stat().st_mode & 0o777, path.with_suffix(".json").stat().st_mode & 0o777) == (0o600, 0o600)
    assert (store.model_dir("m").stat().st_mode & 0o777) == 0o700
    assert store.check(path, "key1") == (1, 2, 3)
    assert store.check(path, "another key") is None
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptState, match="SHA-256"):
        store.check(path, "key1")
    path.write_bytes(bytes(data[:-10]))
    with pytest.raises(CorruptState, match="truncated"):
        store.check(path, "key1")
    path.with_suffix(".json").write_text("{not json")
    with pytest.raises(CorruptState, match="sidecar"):
        store.check(path, "key1")


def test_disk_budget_evicts_the_least_recently_used(tmp_path: Path) -> None:
    store = KvStore(tmp_path, 0)
    paths = []
    for i, model in enumerate(["a", "b", "a", "c"]):
        path = _slot_file(store.model_dir(model) / f"k-r0-s{i}.bin", [i], state=b"\0" * 1000)
        store.commit(path, "k", 1)
        os.utime(path, (1000.0 + i, 1000.0 + i))
        paths.append(path)
    store.touch(paths[0])  # restored just now: the most recently used
    size = paths[0].stat().st_size
    store.budget = 2 * size
    dropped = store.enforce_budget()
    assert dropped == [paths[1], paths[2]]
    assert [p.exists() for p in paths] == [True, False, False, True]
    assert not paths[1].with_suffix(".json").exists()


def test_unsealed_files_are_dropped(tmp_path: Path) -> None:
    store = KvStore(tmp_path, 1 << 20)
    sealed = store.commit(_slot_file(store.model_dir("m") / "a.bin", [1]), "k", 1).path
    half = _slot_file(store.model_dir("m") / "b.bin", [1])
    assert store.drop_unsealed("m") == [half]
    assert sealed.exists() and not half.exists()


def test_per_conversation_the_longest_state_wins(tmp_path: Path) -> None:
    """A slot saved into its ``.part`` file is filed as its own state unless a longer state of
    the same conversation is saved (the shorter is a prefix of the longer but for its tail): a
    short side request sharing the prompt (an agent's summary call cut short) does not replace
    the main context, a longer turn replaces it, a subagent sharing only the tool list and
    another conversation get their own files, and an empty slot leaves nothing behind."""
    store = KvStore(tmp_path, 1 << 30)
    folder = store.model_dir("m")
    key = "k" * 32
    tools = list(range(300))
    part = folder / slot_filename(key, 0, 0)
    main = store.adopt(_slot_file(part, [*tools, *range(5000, 6000)]), key, checkpoints=3)
    assert main is not None and (main.meta["tokens"], main.meta["checkpoints"]) == (1300, 3)
    assert main.path.name == conv_filename(key, state_id((*tools, *range(5000, 6000))))
    assert store.adopt(_slot_file(part, [*tools, *range(5000, 5400), 7, 8]), key) is None  # shorter: main stays
    assert read_tokens(main.path)[-1] == 5999 and not part.exists()
    longer = store.adopt(_slot_file(part, [*tools, *range(5000, 5900), *range(7000, 7600)]), key)
    assert longer is not None and longer.meta["tokens"] == 1800 and not main.path.exists()
    sub = store.adopt(_slot_file(part, [*tools, *range(8000, 8900)]), key)  # the same tools, then its own
    other = store.adopt(_slot_file(part, [9, 9, 9]), key)
    assert sub is not None and other is not None
    assert store.adopt(_slot_file(part, []), key) is None  # nothing in the slot: no file
    for i, saved in enumerate((longer, sub, other)):
        os.utime(saved.path, (10000.0 + i, 10000.0 + i))
    # the most recently used first, but a short state (a side request) after every long one
    assert [s.path for s in store.saved("m", key)] == [sub.path, longer.path, other.path]
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(n for s in (longer, sub, other) for n in (s.path.name, s.sidecar.name))
    assert same_conversation((1, 2, 3), (1, 2, 3, 4)) and not same_conversation((1, 2, 3), (1, 2, 4))


def test_affinity_prefers_the_slot_whose_prompt_the_request_extends() -> None:
    table = SlotHoldings()
    system = list(range(100))
    table.set("r0", 0, [*system, 500, 501, 502])  # the system prompt plus another conversation
    table.set("r0", 1, system)  # exactly the system prompt (a warm prefix)
    table.set("r1", 0, list(range(1000, 1100)))
    reps = [Replica("r0", 2, 0), Replica("r1", 1, 0)]
    assert table.choose([*system, 600, 601], reps) == table.choose([*system, 600], reps)
    choice = table.choose([*system, 600, 601], reps)
    assert choice is not None and (choice.replica, choice.slot, choice.matched) == ("r0", 1, 100)
    choice = table.choose([*range(1000, 1100), 7], reps)
    assert choice is not None and (choice.replica, choice.slot) == ("r1", 0)
    table.begin("r1", 0, list(range(1000, 1100)))  # busy: the next one goes elsewhere
    choice = table.choose([*range(1000, 1100), 7], [Replica("r0", 2, 1), Replica("r1", 1, 1)])
    assert choice is not None and choice.replica == "r0" and choice.matched == 0


def test_affinity_without_a_match_takes_the_least_busy_replica_and_an_empty_slot() -> None:
    table = SlotHoldings()
    table.set("r1", 0, [1, 2, 3])
    choice = table.choose([9, 9, 9], [Replica("r0", 2, 3), Replica("r1", 2, 0)])
    assert choice is not None and (choice.replica, choice.slot) == ("r1", 1)
    table.begin("r1", 0, [1])
    table.begin("r1", 1, [2])
    choice = table.choose([9], [Replica("r1", 2, 2)])
    assert choice is not None and choice.slot is None
    assert table.choose([9], []) is None
