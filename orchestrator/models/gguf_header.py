"""Read a GGUF file's header (metadata and tensor infos) without touching tensor data.

Why not ``gguf.GGUFReader``: it memory-maps the whole file and builds one numpy view per
array item, which takes about 10 s for the 300,000 strings of a Qwen tokenizer on these
machines. This reader walks the header once with buffered ``read()`` calls and stops at the
end of the tensor infos, so its cost depends on the header size, never on the weights. It
still uses the ``gguf`` package for the format's constants (value types, tensor types and
their block sizes).

Format (gguf-py/gguf/constants.py and ggml/src/gguf.cpp in the pinned llama.cpp):
``magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv | n_kv x (string key, u32 type,
value) | n_tensors x (string name, u32 n_dims, n_dims x u64 ne, u32 type, u64 offset) |
padding to general.alignment (default 32) | tensor data``.
"""

from __future__ import annotations

import functools
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from orchestrator.errors import UserError

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32

# Sanity limits: a corrupt header must fail with a clear message, not allocate gigabytes.
_MAX_STRING = 1 << 28  # bytes (a chat template is a few KiB; 256 MiB is surely corrupt)
_MAX_ITEMS = 1 << 26  # array items or tensors
_MAX_DIMS = 8  # GGML_MAX_DIMS is 4; leave room

# numeric GGUF value types -> struct format (little-endian)
_SCALAR_FMT: dict[int, str] = {
    0: "<B",  # UINT8
    1: "<b",  # INT8
    2: "<H",  # UINT16
    3: "<h",  # INT16
    4: "<I",  # UINT32
    5: "<i",  # INT32
    6: "<f",  # FLOAT32
    7: "<?",  # BOOL
    10: "<Q",  # UINT64
    11: "<q",  # INT64
    12: "<d",  # FLOAT64
}
_STRING = 8
_ARRAY = 9
_U64 = struct.Struct("<Q")


@dataclass(frozen=True)
class ArraySummary:
    """A metadata array that was skipped rather than kept: its item type and length."""

    item_type: int
    count: int

    def __len__(self) -> int:
        return self.count


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's header entry. ``shape`` is in ggml order (``ne0`` first, the row length);
    ``nbytes`` is None for a tensor type this gguf package does not know."""

    name: str
    shape: tuple[int, ...]
    type_id: int
    type_name: str
    offset: int  # bytes from the start of the data section
    nbytes: int | None

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass
class GGUFHeader:
    """Everything before the tensor data of one GGUF file.

    ``metadata`` maps each key to a Python value: int/float/bool/str, a list for small arrays
    and for the string arrays named in ``keep_string_arrays``, a ``list[int|float]`` for
    numeric arrays, or an ``ArraySummary`` for other large string arrays.
    """

    path: Path
    version: int
    metadata: dict[str, Any]
    value_types: dict[str, tuple[int, int | None]]  # key -> (type, item type for arrays)
    tensors: list[TensorInfo]
    header_bytes: int  # end of the tensor infos
    data_offset: int  # start of the tensor data (aligned)
    file_size: int
    bytes_read: int = field(default=0)

    @property
    def data_end(self) -> int:
        """Where the last tensor ends (bytes from the file start); what the file must hold."""
        ends = [t.offset + t.nbytes for t in self.tensors if t.nbytes is not None]
        return self.data_offset + (max(ends) if ends else 0)


class _Reader:
    """Buffered little-endian reader that turns EOF into a 'truncated' ``UserError``."""

    def __init__(self, fp: BinaryIO, path: Path) -> None:
        self.fp = fp
        self.path = path
        self.pos = 0

    def read(self, n: int) -> bytes:
        data = self.fp.read(n)
        if len(data) != n:
            raise UserError(
                f"{self.path}: truncated GGUF header (ends at byte {self.pos + len(data):,})",
                hint="the file is incomplete; download or copy it again",
            )
        self.pos += n
        return data

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def u32(self) -> int:
        return int(self.unpack("<I"))

    def u64(self) -> int:
        return int(self.unpack("<Q"))

    def count(self, what: str) -> int:
        n = self.u64()
        if n > _MAX_ITEMS:
            raise UserError(f"{self.path}: corrupt GGUF header ({what} count {n:,} at byte {self.pos:,})")
        return n

    def string_bytes(self) -> bytes:
        n = self.u64()
        if n > _MAX_STRING:
            raise UserError(f"{self.path}: corrupt GGUF header (string of {n:,} bytes at byte {self.pos:,})")
        return self.read(n)

    def string(self) -> str:
        return self.string_bytes().decode("utf-8", errors="replace")

    def strings(self, n: int, keep: bool) -> list[str]:
        """``n`` strings of an array, decoded if ``keep`` (else skipped: an empty list).

        One pass over 1 MiB reads with ``unpack_from``: two ``read()`` calls per item cost about
        1 us each, most of the time a 300,000-string tokenizer took. Reads past the array are
        given back with a relative seek, so the reader stays where the array ends."""
        out: list[str] = []
        buf, at = b"", 0
        for _ in range(n):
            if len(buf) - at < 8:
                buf, at = self._refill(buf, at, 8), 0
            (size,) = _U64.unpack_from(buf, at)
            at += 8
            self.pos += 8
            if size > _MAX_STRING:  # at the byte after the length, as string_bytes says it
                raise UserError(f"{self.path}: corrupt GGUF header (string of {size:,} bytes at byte {self.pos:,})")
            if len(buf) - at < size:
                buf, at = self._refill(buf, at, size), 0
            if keep:
                out.append(buf[at : at + size].decode("utf-8", errors="replace"))
            at += size
            self.pos += size
        if len(buf) > at:
            self.fp.seek(at - len(buf), os.SEEK_CUR)
        return out

    def _refill(self, buf: bytes, at: int, need: int) -> bytes:
        """``buf[at:]`` plus at least enough to hold ``need`` bytes (1 MiB more at a time)."""
        rest = buf[at:]
        more = self.fp.read(max(need - len(rest), 1 << 20))
        if len(rest) + len(more) < need:
            raise UserError(
                f"{self.path}: truncated GGUF header (ends at byte {self.pos + len(rest) + len(more):,})",
                hint="the file is incomplete; download or copy it again",
            )
        return rest + more


def _type_info(type_id: int) -> tuple[str, tuple[int, int] | None]:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        qtype = GGMLQuantizationType(type_id)
    except ValueError:
        return f"type{type_id}", None
    return qtype.name, GGML_QUANT_SIZES.get(qtype)


def _read_value(r: _Reader, vtype: int, key: str, keep: frozenset[str]) -> tuple[Any, int | None]:
    if vtype in _SCALAR_FMT:
        return r.unpack(_SCALAR_FMT[vtype]), None
    if vtype == _STRING:
        return r.string(), None
    if vtype != _ARRAY:
        raise UserError(f"{r.path}: corrupt GGUF header (key {key!r} has unknown value type {vtype})")
    item_type = r.u32()
    n = r.count(f"array {key!r}")
    if item_type in _SCALAR_FMT:
        fmt = _SCALAR_FMT[item_type]
        size = struct.calcsize(fmt)
        raw = r.read(n * size)
        return list(struct.unpack(f"<{n}{fmt[1]}", raw)), item_type
    if item_type == _STRING:
        if key in keep or n <= 64:
            return r.strings(n, keep=True), item_type
        r.strings(n, keep=False)
        return ArraySummary(item_type, n), item_type
    raise UserError(f"{r.path}: corrupt GGUF header (array {key!r} has item type {item_type})")


def read_header(path: Path, *, keep_string_arrays: tuple[str, ...] = ("tokenizer.ggml.tokens",)) -> GGUFHeader:
    """Parse the header of ``path`` (metadata + tensor infos); never reads tensor data.

    Args:
        path: a ``.gguf`` file.
        keep_string_arrays: string-array keys to return in full; other string arrays longer
            than 64 items come back as ``ArraySummary`` (e.g. ``tokenizer.ggml.merges``).

    Returns: a ``GGUFHeader``; sizes in bytes.

    Raises:
        UserError: the file is missing or unreadable, is not a GGUF file, has an unsupported
            version (only 2 and 3 are read, as in the pinned ``ggml/src/gguf.cpp``), has a
            corrupt or truncated header, or is shorter than its tensor infos say (truncated
            copy).
    """
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file", hint="check the path (for split models give the first part)")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, not a .gguf file")
    try:
        stamp = file_stamp(path)
    except OSError as err:
        raise UserError(f"{path}: cannot read ({err.strerror or err})") from None
    # the same file as last time (``file_stamp``): its header, read once. A plan reads
    # each model's header for its facts and again for its template, and every reload plans again:
    # a Qwen tokenizer's 300,000 strings take 0.1-0.2 s of Python each time.
    # Only headers without kept string arrays are kept: a Qwen tokenizer's token list is about
    # 23 MiB of Python strings (read_model_facts keeps its facts instead, models/facts.py).
    read = _read_header_of.__wrapped__ if keep_string_arrays else _read_header_of
    return read(str(path), stamp, frozenset(keep_string_arrays))


def file_stamp(path: Path) -> tuple[int, ...]:
    """What tells one version of a file from another: device, inode, size, mtime and ctime (a
    write in place changes the ctime even when ``cp -p`` or ``touch -r`` puts the mtime back).
    Raises ``OSError`` as ``stat``."""
    st = path.stat()
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


@functools.lru_cache(maxsize=8)
def _read_header_of(name: str, stamp: tuple[int, ...], keep: frozenset[str]) -> GGUFHeader:
    """``read_header`` of the file ``name`` as of that stat: shared between callers (never modify it)."""
    path = Path(name)
    try:
        with open(path, "rb", buffering=1 << 20) as fp:
            r = _Reader(fp, path)
            version = _read_preamble(r)
            n_tensors = r.count("tensor")
            n_kv = r.count("metadata key")
            metadata, value_types = _read_metadata(r, n_kv, keep)
            tensors = [_read_tensor_info(r) for _ in range(n_tensors)]
            header_bytes = r.pos
    except OSError as err:
        raise UserError(f"{path}: cannot read ({err.strerror or err})") from None
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0:
        alignment = DEFAULT_ALIGNMENT
    data_offset = -(-header_bytes // alignment) * alignment
    header = GGUFHeader(
        path=path,
        version=version,
        metadata=metadata,
        value_types=value_types,
        tensors=tensors,
        header_bytes=header_bytes,
        data_offset=data_offset,
        file_size=stamp[2],
        bytes_read=header_bytes,
    )
    if tensors and header.data_end > header.file_size:
        raise UserError(
            f"{path}: truncated GGUF file ({header.file_size:,} bytes, its tensors need {header.data_end:,})",
            hint="the download or copy is incomplete; fetch the file again",
        )
    return header


def _read_preamble(r: _Reader) -> int:
    """Check the magic and return the GGUF version."""
    magic = r.fp.read(4)
    r.pos = len(magic)
    if magic != GGUF_MAGIC:
        raise UserError(
            f"{r.path}: not a GGUF file (starts with {magic!r}, expected b'GGUF')",
            hint="give the path of a .gguf model file",
        )
    version = r.u32()
    if version not in SUPPORTED_VERSIONS:
        raise UserError(
            f"{r.path}: unsupported GGUF version {version} (supported: 2, 3)",
            hint="re-convert the model with a current convert_hf_to_gguf.py",
        )
    return version


def _read_metadata(
    r: _Reader, n_kv: int, keep: frozenset[str]
) -> tuple[dict[str, Any], dict[str, tuple[int, int | None]]]:
    metadata: dict[str, Any] = {}
    value_types: dict[str, tuple[int, int | None]] = {}
    for _ in range(n_kv):
        key = r.string()
        vtype = r.u32()
        value, item_type = _read_value(r, vtype, key, keep)
        metadata[key] = value
        value_types[key] = (vtype, item_type)
    return metadata, value_types


def _read_tensor_info(r: _Reader) -> TensorInfo:
    name = r.string()
    n_dims = r.u32()
    if n_dims > _MAX_DIMS:
        raise UserError(f"{r.path}: corrupt GGUF header (tensor {name!r} has {n_dims} dims)")
    shape = tuple(r.u64() for _ in range(n_dims))
    type_id = r.u32()
    offset = r.u64()
    type_name, sizes = _type_info(type_id)
    nbytes = None
    if sizes is not None:
        block, type_size = sizes
        n = 1
        for d in shape:
            n *= d
        nbytes = n // block * type_size
    return TensorInfo(name, shape, type_id, type_name, offset, nbytes)
