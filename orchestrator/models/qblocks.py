"""Encode float rows into ggml block formats (F32, F16, Q8_0, Q4_K, Q6_K) with numpy alone.

The shaped model generator (``orchestrator.models.shaped``) writes its few non-zero tensors
through these encoders; everything else is zero blocks, which are all-zero bytes in every
format here. The encoders are plain min/max quantisers, not llama.cpp's error-searching
ones: the shaped model's rows are two-level codewords, single spikes and Gaussian noise,
which they encode exactly or closely enough. They need no ``gguf`` package, so the GPU
check runs on a box without it.

Block layouts follow ``ggml/src/ggml-common.h`` of the pinned llama.cpp:

* ``block_q8_0``: ``half d; int8 qs[32]`` (34 bytes per 32 values), ``y = d * q``.
* ``block_q4_K``: ``half d; half dmin; uint8 scales[12]; uint8 qs[128]`` (144 bytes per 256),
  8 sub-blocks of 32 with 6-bit scale and min (``get_scale_min_k4``), ``y = d*sc*q - dmin*m``.
* ``block_q6_K``: ``uint8 ql[128]; uint8 qh[64]; int8 scales[16]; half d`` (210 bytes per 256),
  16 sub-blocks of 16, ``y = d * scale * (q - 32)`` (``dequantize_row_q6_K``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

QK_K = 256


@dataclass(frozen=True)
class BlockType:
    """A ggml tensor type: its id in the GGUF tensor info, values per block, bytes per block."""

    name: str
    type_id: int
    block: int
    block_bytes: int

    def row_bytes(self, n: int) -> int:
        """Bytes of a row of ``n`` values (``n`` must be a multiple of ``block``)."""
        if n % self.block:
            raise ValueError(f"{self.name} rows must hold a multiple of {self.block} values, got {n}")
        return n // self.block * self.block_bytes


# ids: ggml_type in ggml/include/ggml.h
TYPES = {
    "F32": BlockType("F32", 0, 1, 4),
    "F16": BlockType("F16", 1, 1, 2),
    "Q8_0": BlockType("Q8_0", 8, 32, 34),
    "Q4_K": BlockType("Q4_K", 12, QK_K, 144),
    "Q6_K": BlockType("Q6_K", 14, QK_K, 210),
}


def encode(rows: np.ndarray, type_name: str) -> np.ndarray:
    """Encode ``rows`` (float, shape ``[n_rows, n]``, ``n`` a multiple of the block size) into
    ``uint8 [n_rows, row_bytes]``. Raises ``ValueError`` for a bad row length or type."""
    x = np.ascontiguousarray(rows, dtype=np.float32)
    t = TYPES[type_name]
    n_rows, n = x.shape
    t.row_bytes(n)
    if type_name == "F32":
        return x.view(np.uint8).reshape(n_rows, -1)
    if type_name == "F16":
        return x.astype("<f2").view(np.uint8).reshape(n_rows, -1)
    blocks = x.reshape(-1, t.block)
    out = {"Q8_0": _q8_0, "Q4_K": _q4_k, "Q6_K": _q6_k}[type_name](blocks)
    return out.reshape(n_rows, -1)


def _f16(a: np.ndarray) -> np.ndarray:
    return a.astype("<f2")


def _safe_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.zeros(np.broadcast_shapes(a.shape, b.shape), dtype=np.float32)
    np.divide(a, b, out=out, where=b != 0)
    return out


def _q8_0(x: np.ndarray) -> np.ndarray:
    d = _f16(np.abs(x).max(axis=1) / 127.0)
    q = np.clip(np.rint(_safe_div(x, d.astype(np.float32)[:, None])), -127, 127).astype(np.int8)
    out = np.empty((len(x), 34), dtype=np.uint8)
    out[:, :2] = d.view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out


def _q4_k(x: np.ndarray) -> np.ndarray:
    sub = x.reshape(-1, 8, 32)
    lo = np.minimum(sub.min(axis=2), 0.0)
    scale = (sub.max(axis=2) - lo) / 15.0  # [n, 8]
    mins = -lo
    d = _f16(scale.max(axis=1) / 63.0)
    dmin = _f16(mins.max(axis=1) / 63.0)
    df, dminf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    sc = np.clip(np.rint(_safe_div(scale, df)), 0, 63).astype(np.uint8)
    m = np.clip(np.rint(_safe_div(mins, dminf)), 0, 63).astype(np.uint8)
    step = (df * sc)[:, :, None]
    q = np.clip(np.rint(_safe_div(sub + (dminf * m)[:, :, None], step)), 0, 15).astype(np.uint8)
    scales = np.empty((len(x), 12), dtype=np.uint8)
    scales[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    scales[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:8] & 0xF) | ((m[:, 4:8] & 0xF) << 4)
    q64 = q.reshape(-1, 4, 2, 32)  # 4 chunks of 64 values: low nibble = first 32, high = next 32
    qs = (q64[:, :, 0, :] | (q64[:, :, 1, :] << 4)).reshape(-1, 128)
    out = np.empty((len(x), 144), dtype=np.uint8)
    out[:, 0:2] = d.view(np.uint8).reshape(-1, 2)
    out[:, 2:4] = dmin.view(np.uint8).reshape(-1, 2)
    out[:, 4:16] = scales
    out[:, 16:] = qs
    return out


def _q6_k(x: np.ndarray) -> np.ndarray:
    sub = x.reshape(-1, 16, 16)
    idx = np.abs(sub).argmax(axis=2)
    peak = np.take_along_axis(sub, idx[:, :, None], axis=2)[:, :, 0]
    scale = np.abs(peak) / 31.0  # [n, 16] (q - 32 in [-31, 31])
    d = _f16(scale.max(axis=1) / 127.0)
    df = d.astype(np.float32)[:, None]
    sc = np.clip(np.rint(_safe_div(scale, df)), 0, 127).astype(np.int8)
    step = (df * sc)[:, :, None]
    q = (np.clip(np.rint(_safe_div(sub, step)), -32, 31) + 32).astype(np.uint8).reshape(-1, 2, 4, 32)
    # per half h: q[h, k, l] is value 128h + 32k + l
    ql = np.empty((len(x), 2, 64), dtype=np.uint8)
    ql[:, :, 0:32] = (q[:, :, 0] & 0xF) | ((q[:, :, 2] & 0xF) << 4)
    ql[:, :, 32:64] = (q[:, :, 1] & 0xF) | ((q[:, :, 3] & 0xF) << 4)
    qh = (q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4) | ((q[:, :, 3] >> 4) << 6)
    out = np.empty((len(x), 210), dtype=np.uint8)
    out[:, 0:128] = ql.reshape(-1, 128)
    out[:, 128:192] = qh.reshape(-1, 64)
    out[:, 192:208] = sc.view(np.uint8)
    out[:, 208:210] = d.view(np.uint8).reshape(-1, 2)
    return out
