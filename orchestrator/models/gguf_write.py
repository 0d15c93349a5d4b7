"""Write a GGUF file whose tensors are streamed one row chunk at a time, with zero tensors left as holes.

``write_gguf(path, kvs, tensors)`` writes the header (metadata and tensor infos), then each
tensor's data at its aligned offset: a tensor with a ``fill`` callback gets the bytes the
callback writes; a tensor without one is all zeros and is skipped with a seek, so on
filesystems with sparse files (ext4, xfs, tmpfs) it takes no disk space and no write time.
Zero bytes are zero values in every ggml type (``qblocks``). Memory use is one row chunk,
whatever the model's size.

Format (ggml/src/gguf.cpp of the pinned llama.cpp, version 3): ``"GGUF" | u32 version | u64
n_tensors | u64 n_kv | kv... | tensor infos... | padding to general.alignment (32) | data``.
No ``gguf`` package needed: the GPU check runs where it is not installed.
"""

from __future__ import annotations

import os
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from orchestrator.models.qblocks import TYPES

GGUF_VERSION = 3
ALIGNMENT = 32

# GGUF value types (gguf-py/gguf/constants.py GGUFValueType)
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
_FMT = {
    UINT8: "<B",
    INT8: "<b",
    UINT16: "<H",
    INT16: "<h",
    UINT32: "<I",
    INT32: "<i",
    FLOAT32: "<f",
    BOOL: "<?",
    UINT64: "<Q",
    INT64: "<q",
    FLOAT64: "<d",
}


@dataclass(frozen=True)
class KV:
    """One metadata entry; ``item_type`` is the element type of an ``ARRAY`` value."""

    key: str
    vtype: int
    value: Any
    item_type: int | None = None


@dataclass(frozen=True)
class TensorSpec:
    """One tensor: ``shape`` in ggml order (``ne0``, the row length, first), ggml ``type_name``
    (``qblocks.TYPES``) and ``fill(fh)``, which writes exactly ``nbytes`` bytes, or None for zeros."""

    name: str
    shape: tuple[int, ...]
    type_name: str
    fill: Callable[[BinaryIO], None] | None = None

    @property
    def row_bytes(self) -> int:
        return TYPES[self.type_name].row_bytes(self.shape[0])

    @property
    def nbytes(self) -> int:
        rows = 1
        for d in self.shape[1:]:
            rows *= d
        return self.row_bytes * rows


def _string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _value(vtype: int, value: Any, item_type: int | None) -> bytes:
    if vtype == STRING:
        return _string(value)
    if vtype == ARRAY:
        if item_type is None:
            raise ValueError("an ARRAY value needs an item type")
        head = struct.pack("<IQ", item_type, len(value))
        if item_type == STRING:
            return head + b"".join(_string(v) for v in value)
        fmt = _FMT[item_type]
        return head + struct.pack(f"<{len(value)}{fmt[1]}", *value)
    return struct.pack(_FMT[vtype], value)


def _pad(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def header_bytes(kvs: list[KV], tensors: list[TensorSpec]) -> tuple[bytes, list[int]]:
    """The header up to the tensor data (padded) and each tensor's offset within the data."""
    parts = [b"GGUF", struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(kvs))]
    for kv in kvs:
        parts += [_string(kv.key), struct.pack("<I", kv.vtype), _value(kv.vtype, kv.value, kv.item_type)]
    offsets, at = [], 0
    for t in tensors:
        offsets.append(at)
        dims = struct.pack(f"<I{len(t.shape)}Q", len(t.shape), *t.shape)
        parts += [_string(t.name), dims, struct.pack("<IQ", TYPES[t.type_name].type_id, at)]
        at = _pad(at + t.nbytes)
    head = b"".join(parts)
    return head + b"\0" * (_pad(len(head)) - len(head)), offsets


def write_gguf(
    path: Path, kvs: list[KV], tensors: list[TensorSpec], progress: Callable[[str], None] | None = None
) -> int:
    """Write the GGUF file atomically (a temporary file renamed into place); returns its size in bytes.

    Raises ``OSError`` (e.g. disk full) and ``RuntimeError`` when a ``fill`` wrote the wrong
    number of bytes; the temporary file is removed either way.
    """
    path = Path(path)
    head, offsets = header_bytes(kvs, tensors)
    total = len(head) + (offsets[-1] + tensors[-1].nbytes if tensors else 0)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(head)
            for t, off in zip(tensors, offsets, strict=True):
                if t.fill is None:
                    continue
                fh.seek(len(head) + off)
                t.fill(fh)
                if fh.tell() != len(head) + off + t.nbytes:
                    raise RuntimeError(f"{t.name}: wrote {fh.tell() - len(head) - off} bytes, expected {t.nbytes}")
                if progress:
                    progress(t.name)
            fh.truncate(total)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return total
