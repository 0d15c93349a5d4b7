"""Saved prompt caches on disk (``kv_persist``): what a file holds, whom it belongs to, the disk budget.

llama-server writes a slot's state with ``POST /slots/{id}?action=save`` into its
``--slot-save-path``; the format is ``llama_state_seq_save_file`` (src/llama-context.cpp of the
pin): u32 magic ``ggsq``, u32 version 4, u32 token count, the tokens, then the sequence state
(attention KV and, for hybrid models, the recurrent state). Version 4 (b11434) added the KV
cache's rotation widths to the state, so a version-3 file (the b11312 pin) means something else:
it is ``OutdatedState``, removed with one log line and never handed to llama-server. At this pin the "tokens" are the
server's packed ``server_tokens`` (tools/server/server-common.cpp): ``LLAMA_TOKEN_NULL``, a
format version, then a u32-counted token list. Older files hold a plain token list.

With native patch 0003 a trailer follows the sequence state (magic ``SLCK``, version 1): the
draft context's state and the slot's context checkpoints, so a restored hybrid model rolls back
to a checkpoint like the live server. Files without it still restore (without checkpoints).

Files are kept per conversation, not per slot: llama-server writes a slot into a ``.part`` file,
which becomes ``<key>-c<state>.bin`` (``state_id``: a hash of its tokens), unless a saved state
of the same conversation is longer (``same_conversation``: the shorter one is, but for its tail,
a prefix of the longer; the longest wins, so an agent's short title or summary call never
replaces its main context, while a subagent sharing only the tool list is its own conversation).
A longer state replaces the shorter ones of its conversation. At a load the most recently used
states go back into the slots first, short ones (under ``SHORT_STATE_TOKENS``) last.

Beside each ``<name>.bin`` the orchestrator writes ``<name>.json``: the layout key it was saved
under, its size and SHA-256, the token count and the conversation. The sidecar is written last, so a file
without one was never finished. A file is restored only when its sidecar's key equals the
loading instance's key (``layout_key``: the GGUF's identity, the build, and every launch
argument that shapes the KV cache), its size and SHA-256 match, and its header parses.

The budget (``server.kv_disk_budget``, bytes) covers every model's files; the least recently
used (saved or restored, by the ``.bin``'s modification time) go first.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.launch.spec import InstanceSpec

STATE_MAGIC = 0x67677371  # 'ggsq': LLAMA_STATE_SEQ_MAGIC (include/llama.h)
STATE_VERSION = 4  # LLAMA_STATE_SEQ_VERSION of the pin (include/llama.h; 3 before b11434)
TOKEN_NULL = -1  # LLAMA_TOKEN_NULL: marks the packed server_tokens format, and each media chunk's positions
CONV_SLACK = 0.1  # share of a state's tail a later turn of its conversation may re-render (the answer)
CONV_MIN_SLACK = 64  # tokens, for short states
SHORT_STATE_TOKENS = 1024  # shorter saved states are restored after the longer ones (side requests)
SAMPLE_BYTES = 8 * 1024 * 1024  # bytes hashed at each end of a GGUF for its identity
_HASH_CHUNK = 4 * 1024 * 1024


class CorruptState(Exception):
    """A saved slot file that must not be restored: truncated, altered, or not a slot file."""


class OutdatedState(CorruptState):
    """A slot file written by a llama.cpp of another state version (an older pin): sound, but its
    state is laid out differently, so it is removed rather than restored. ``version`` is the file's."""

    def __init__(self, message: str, version: int) -> None:
        super().__init__(message)
        self.version = version


@dataclass(frozen=True)
class SavedSlot:
    """One saved slot on disk: ``path`` (the ``.bin``), its sidecar ``meta`` and bytes ``size``."""

    path: Path
    meta: dict[str, Any]
    size: int

    @property
    def sidecar(self) -> Path:
        return self.path.with_suffix(".json")


def read_tokens(path: Path) -> tuple[int, ...]:
    """The prompt tokens a llama-server slot file holds (header only; the state is not read).

    Raises:
        OutdatedState: a ``ggsq`` file of another state version (an older llama.cpp wrote it).
        CorruptState: not a ``ggsq`` file, or its token list runs past the end.
    """
    try:
        with path.open("rb") as f:
            head = f.read(12)
            if len(head) < 12:
                raise CorruptState(f"{path.name}: {len(head)} bytes, shorter than the header")
            magic, version, count = struct.unpack("<III", head)
            if magic != STATE_MAGIC:
                raise CorruptState(f"{path.name}: not a slot file (magic {magic:#x}, version {version})")
            if version != STATE_VERSION:
                raise OutdatedState(
                    f"{path.name}: saved by another llama.cpp (slot state version {version}, "
                    f"this build reads {STATE_VERSION})",
                    version,
                )
            raw = f.read(4 * count)
    except OSError as err:
        raise CorruptState(f"{path.name}: {err}") from None
    if len(raw) < 4 * count:
        raise CorruptState(f"{path.name}: truncated inside its token list")
    # llama_token is i32: a media chunk's positions are LLAMA_TOKEN_NULL (-1), and state_id packs i32
    packed = struct.unpack(f"<{count}i", raw)
    if not packed or packed[0] != TOKEN_NULL:
        return tuple(packed)
    if len(packed) < 3 or not 0 <= packed[2] <= len(packed) - 3:
        raise CorruptState(f"{path.name}: packed token list is inconsistent")
    return tuple(packed[3 : 3 + packed[2]])


def sha256_file(path: Path) -> str:
    """SHA-256 (hex) of a whole file (blocking; call it in a thread for large files)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def model_identity(gguf: Path) -> str:
    """A content identity of a GGUF (hex): SHA-256 of its size and its first and last
    ``SAMPLE_BYTES`` bytes (the header, tensor table and both ends of the data). Hashing all of
    a 20 GB file at every load would cost more than the prefill it saves; a re-quantised or
    re-downloaded file changes its header or size. Cached per (path, size, mtime)."""
    st = gguf.stat()
    return _identity(str(gguf.resolve()), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=32)
def _identity(path: str, size: int, _mtime_ns: int) -> str:
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        h.update(f.read(SAMPLE_BYTES))
        if size > 2 * SAMPLE_BYTES:
            f.seek(size - SAMPLE_BYTES)
        h.update(f.read(SAMPLE_BYTES))
    return h.hexdigest()


def layout_key(spec: InstanceSpec) -> str:
    """The key a saved slot of ``spec`` belongs to (hex, 32 chars).

    Covers what decides whether a saved state means the same thing when restored: the GGUF's
    identity, the llama-server build (its path names the pin, patches and flags), the context
    per slot (``ctx_size``, ``parallel``), speculation (the MTP head adds a layer of KV) and
    every ``extra_args`` flag (cache types, flash attention, RoPE scaling, ...), and the vision
    projector (a slot holding an image keeps that image's KV, which another projector would
    compute differently, yet llama-server matches cached media by the image alone). Threads, GPU
    placement and port do not change the saved bytes' meaning and are left out.
    """
    server = spec.server
    parts = {
        "model": model_identity(server.model),
        "program": list(server.program),
        "ctx_size": server.ctx_size,
        "parallel": server.parallel,
        "speculation": spec.spec_type,
        "extra_args": list(server.extra_args),
    }
    if server.mmproj is not None:
        parts["mmproj"] = model_identity(server.mmproj)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def slot_filename(key: str, replica: int, slot: int) -> str:
    """The name (no folder; llama-server refuses paths) replica ``replica`` saves slot ``slot``
    into, before ``KvStore.adopt`` files it under its conversation."""
    return f"{key[:16]}-r{replica}-s{slot}.part"


def state_id(tokens: tuple[int, ...] | list[int]) -> str:
    """A saved state's identity (hex, 16 chars): a hash of all its tokens."""
    return hashlib.sha256(struct.pack(f"<{len(tokens)}i", *tokens)).hexdigest()[:16]


def conv_filename(key: str, state: str) -> str:
    """The file name of the saved state ``state`` (``state_id``) under layout ``key``."""
    return f"{key[:16]}-c{state}.bin"


def same_conversation(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether two saved states are turns of one conversation: the shorter one is, but for its
    last ``CONV_SLACK`` (at least ``CONV_MIN_SLACK`` tokens: the answer, which the next turn
    re-renders), a prefix of the longer one."""
    short, long = (a, b) if len(a) <= len(b) else (b, a)
    need = len(short) - max(CONV_MIN_SLACK, int(len(short) * CONV_SLACK))
    if need <= 0:
        return long[: len(short)] == short
    return long[:need] == short[:need]


class KvStore:
    """The saved slots of every model under ``root`` (one folder per model), within ``budget`` bytes."""

    def __init__(self, root: Path, budget: int) -> None:
        self.root = root
        self.budget = budget

    def model_dir(self, model: str) -> Path:
        """The model's folder (created 0700: the files hold prompts)."""
        path = self.root / model
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        if path.stat().st_mode & 0o777 != 0o700:
            path.chmod(0o700)
        return path

    def adopt(self, part: Path, key: str, checkpoints: int = 0) -> SavedSlot | None:
        """File the slot llama-server just wrote into ``part`` under its conversation and seal it;
        None (``part`` deleted) when that conversation already has a longer state, or ``part``
        holds no tokens. Blocking.

        Raises:
            CorruptState: ``part`` is not a slot file.
            OSError: the folder cannot be written (read-only, full, not ours).
        """
        try:
            tokens = read_tokens(part)
            if not tokens or not self._supersedes(part.parent, key, tokens):
                return None
            final = part.with_name(conv_filename(key, state_id(tokens)))
            self.drop(final)
            os.replace(part, final)
        finally:
            with contextlib.suppress(FileNotFoundError):
                part.unlink()
        return self.commit(final, key, len(tokens), checkpoints=checkpoints)

    def _supersedes(self, folder: Path, key: str, tokens: tuple[int, ...]) -> bool:
        """False when a saved state of ``tokens``' conversation in ``folder`` is longer; else True,
        having deleted the shorter ones of that conversation."""
        same = []
        for saved in self.files():
            if saved.path.parent != folder or saved.meta.get("key") != key:
                continue
            try:
                other = read_tokens(saved.path)
            except CorruptState:
                continue
            if same_conversation(tokens, other):
                if len(other) > len(tokens):
                    return False
                same.append(saved.path)
        for path in same:
            self.drop(path)
        return True

    def commit(self, path: Path, key: str, n_tokens: int, **extra: Any) -> SavedSlot:
        """Seal a file llama-server just wrote: mode 0600, then its sidecar (written last, atomically);
        ``extra`` goes into the sidecar."""
        path.chmod(0o600)
        size = path.stat().st_size
        meta = {"key": key, "bytes": size, "sha256": sha256_file(path), "tokens": n_tokens, "saved_at": time.time()}
        meta.update(extra)
        tmp = path.with_suffix(".json.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(meta, f)
        os.replace(tmp, path.with_suffix(".json"))
        return SavedSlot(path, meta, size)

    def check(self, path: Path, key: str) -> tuple[int, ...] | None:
        """The tokens of ``path`` when it may be restored for ``key``; None when it belongs to
        another key (left alone). Blocking (hashes the file).

        Raises:
            CorruptState: no or unreadable sidecar, or size, SHA-256 or header wrong.
        """
        try:
            meta = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise CorruptState(f"{path.name}: no valid sidecar ({err})") from None
        if not isinstance(meta, dict) or meta.get("key") != key:
            return None
        size = path.stat().st_size
        if size != meta.get("bytes"):
            raise CorruptState(f"{path.name}: {size} bytes, {meta.get('bytes')} were saved (truncated?)")
        if sha256_file(path) != meta.get("sha256"):
            raise CorruptState(f"{path.name}: SHA-256 differs from the saved one (altered on disk)")
        tokens = read_tokens(path)
        if len(tokens) != meta.get("tokens"):
            raise CorruptState(f"{path.name}: {len(tokens)} tokens in the header, {meta.get('tokens')} saved")
        return tokens

    def touch(self, path: Path) -> None:
        """Mark ``path`` used now (the LRU order)."""
        with contextlib.suppress(OSError):
            os.utime(path)

    @staticmethod
    def drop(path: Path) -> None:
        """Delete a slot file and its sidecar (missing ones are fine)."""
        for p in (path, path.with_suffix(".json"), path.with_suffix(".json.tmp")):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()

    def files(self) -> list[SavedSlot]:
        """Every sealed slot file of every model, least recently used first."""
        out = []
        for path in self.root.glob("*/*.bin"):
            try:
                size = path.stat().st_size
                meta = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            out.append(SavedSlot(path, meta if isinstance(meta, dict) else {}, size))
        return sorted(out, key=lambda s: _mtime(s.path))

    def saved(self, model: str, key: str) -> list[SavedSlot]:
        """``model``'s sealed files for layout ``key`` in the order slots get them back: the most
        recently used first (the conversation that ran last is the likeliest next; the same request
        sent again is served from its slot), except that states under ``SHORT_STATE_TOKENS`` (an
        agent's title or summary call, cheap to prefill again) come after every longer one."""
        own = [s for s in self.files() if s.path.parent.name == model and s.meta.get("key") == key]
        return sorted(own, key=lambda s: (int(s.meta.get("tokens", 0)) < SHORT_STATE_TOKENS, -_mtime(s.path)))

    def drop_unsealed(self, model: str) -> list[Path]:
        """Delete ``model``'s files without a sidecar (a save that never finished: killed, disk
        full) and unfiled ``.part`` files. Call it only while nothing of that model is saving.
        Returns the deleted paths."""
        folder = self.model_dir(model)
        dropped = [p for p in folder.glob("*.bin") if not p.with_suffix(".json").exists()]
        dropped += folder.glob("*.part")
        for path in dropped:
            self.drop(path)
        return dropped

    def drop_outdated(self, model: str) -> list[tuple[Path, OutdatedState]]:
        """Delete ``model``'s sealed files whose header is of another state version (saved by an
        older llama.cpp; whatever key they were saved under, no build of this pin reads them).
        Reads headers only. Returns each deleted path with the reason."""
        dropped = []
        for path in sorted(self.model_dir(model).glob("*.bin")):
            try:
                read_tokens(path)
            except OutdatedState as err:
                self.drop(path)
                dropped.append((path, err))
            except CorruptState:
                continue  # damaged: the checks at restore time skip and delete it with a warning
        return dropped

    def enforce_budget(self) -> list[Path]:
        """Delete the least recently used sealed files until the total is within the budget.
        Returns the deleted paths."""
        dropped = []
        files = self.files()
        total = sum(f.size for f in files)
        for f in files:
            if total <= self.budget:
                break
            self.drop(f.path)
            dropped.append(f.path)
            total -= f.size
        return dropped


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
