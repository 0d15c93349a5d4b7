"""The GGUF header reader: string arrays read in big chunks, and one read per unchanged file."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import gguf
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.errors import UserError
from orchestrator.models.facts import read_model_facts
from orchestrator.models.gguf_header import ArraySummary, read_header


def write_strings(path: Path, arrays: dict[str, list[str]]) -> Path:
    """A GGUF with no tensors whose metadata is ``arrays`` (string arrays), then one u32 key."""
    w = gguf.GGUFWriter(str(path), "llama")
    for key, items in arrays.items():
        w.add_array(key, items)
    w.add_uint32("after.arrays", 7)  # read where the arrays end: a wrong position garbles it
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    return path


# short items (non-ASCII, empty), and up to 3 long ones (over the reader's 1 MiB chunk, or crossing it)
# placed anywhere in either array
_LONG = st.tuples(st.booleans(), st.integers(0, 200), st.integers(1, 3))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kept=st.lists(st.text(max_size=12), min_size=65, max_size=120),
    skipped=st.lists(st.text(max_size=12), min_size=65, max_size=120),
    longs=st.lists(_LONG, max_size=3),
)
def test_string_arrays_read_back_kept_or_skipped_whatever_their_sizes(
    tmp_path: Path, kept: list[str], skipped: list[str], longs: list[tuple[bool, int, int]]
) -> None:
    for in_kept, at, size in longs:
        items = kept if in_kept else skipped
        items.insert(at % (len(items) + 1), "x" * (size * 400_000 + 7))
    path = write_strings(tmp_path / "s.gguf", {"tokenizer.ggml.tokens": kept, "tokenizer.ggml.merges": skipped})
    header = read_header(path)
    assert header.metadata["tokenizer.ggml.tokens"] == kept
    assert header.metadata["tokenizer.ggml.merges"] == ArraySummary(8, len(skipped))
    assert header.metadata["after.arrays"] == 7 and header.header_bytes == path.stat().st_size
    path.unlink()


def test_a_header_cut_inside_a_string_array_is_a_truncated_header(tmp_path: Path) -> None:
    whole = write_strings(tmp_path / "whole.gguf", {"tokenizer.ggml.tokens": ["ab"] * 100 + ["y" * 3_000_000]})
    data = whole.read_bytes()
    for cut in (200, len(data) - 2_000_000, len(data) - 5):  # in an item's length, in the long item, near the end
        part = tmp_path / f"cut{cut}.gguf"
        part.write_bytes(data[:cut])
        with pytest.raises(UserError, match=rf"truncated GGUF header \(ends at byte {cut:,}\)"):
            read_header(part)
    bad = bytearray(data)
    at = data.index(struct.pack("<Q", 2) + b"ab")  # the first item's length
    bad[at : at + 8] = struct.pack("<Q", 1 << 40)
    (tmp_path / "huge.gguf").write_bytes(bad)
    with pytest.raises(UserError, match=rf"corrupt GGUF header \(string of {1 << 40:,} bytes at byte {at + 8:,}\)"):
        read_header(tmp_path / "huge.gguf")


def test_an_unchanged_file_is_read_once_and_a_changed_one_again(tmp_path: Path) -> None:
    path = write_strings(tmp_path / "m.gguf", {"tokenizer.ggml.tokens": ["a"] * 70})
    first = read_header(path, keep_string_arrays=())
    assert read_header(path, keep_string_arrays=()) is first  # the same file: the same header, not parsed again
    # one that keeps a string array (a tokenizer's token list: tens of MiB) is never kept
    kept = read_header(path)
    assert kept.metadata["tokenizer.ggml.tokens"] == ["a"] * 70 and read_header(path) is not kept
    replaced = write_strings(tmp_path / "new.gguf", {"tokenizer.ggml.tokens": ["b"] * 80})
    os.replace(replaced, path)  # a new file under the old name
    assert read_header(path, keep_string_arrays=()).metadata["tokenizer.ggml.tokens"] == ArraySummary(8, 80)
    before = path.stat()
    assert read_header(path, keep_string_arrays=()).metadata["after.arrays"] == 7
    time.sleep(0.01)
    with path.open("r+b") as f:  # rewritten in place, same size, and the old mtime put back (cp -p)
        f.seek(-4, os.SEEK_END)  # the u32 after the arrays, little-endian
        f.write(b"\x08")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_mtime_ns == before.st_mtime_ns and path.stat().st_size == before.st_size
    assert read_header(path, keep_string_arrays=()).metadata["after.arrays"] == 8  # its ctime tells


def write_model(path: Path, name: str) -> Path:
    """A one-tensor llama GGUF named ``name`` with a 100-token vocabulary."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(100)])
    w.add_tensor("token_embd.weight", np.zeros((8, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_models_facts_are_read_once_per_unchanged_file(tmp_path: Path) -> None:
    """``read_model_facts`` keeps the facts (small), not the header's token list."""
    path = write_model(tmp_path / "m.gguf", "first")
    facts = read_model_facts(path)
    assert facts.name == "first" and facts.tokenizer.vocab_size == 100 and read_model_facts(path) is facts
    write_model(tmp_path / "m.gguf", "other")
    assert read_model_facts(path).name == "other"
