"""MTP acceptance with and without an image in the prompt, through the endpoint (the GPU check's
vision row, ``docs/gpu-check.md``): the same questions, once as text and once with a small image
beside them, on a model served with a vision projector (``mmproj``) and drafting on.

The pin gives the MTP head the target's embeddings at the image's positions
(``common/speculative.cpp``), so drafting goes on after an image; this measures how well.
"""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Any

import httpx

QUESTION = "Describe what you see, then list three details."


def png(rgb: tuple[int, int, int], size: int = 64) -> str:
    """A ``size`` x ``size`` PNG of one colour with a darker diagonal, base64 (no image library)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    dark = bytes(c // 3 for c in rgb)
    rows = b"".join(b"\0" + b"".join(dark if x == y else bytes(rgb) for x in range(size)) for y in range(size))
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return base64.b64encode(data).decode()


def content(i: int, image: bool) -> Any:
    """Question ``i``: text only, or the same text with an image beside it."""
    text = {"type": "text", "text": f"{QUESTION} ({i})"}
    if not image:
        return [text]
    url = "data:image/png;base64," + png(((40 * i) % 256, 160, 90))
    return [text, {"type": "image_url", "image_url": {"url": url}}]


def measure(endpoint: str, model: str, rounds: int, n_predict: int, n_max: int, timeout: float = 600) -> dict[str, Any]:
    """``{"text": row, "image": row}``, each row drafted and accepted tokens over ``rounds``
    questions, the acceptance rate, prompt tokens per question and decode tok/s (medians).

    Every request names its draft length ``n_max``: an adaptive model's policy would otherwise
    choose, and on a noisy machine it may choose 0 for one of the two rows (nothing drafted, no
    acceptance to compare)."""
    out: dict[str, Any] = {}
    with httpx.Client(timeout=timeout, trust_env=False) as client:
        for label in ("text", "image"):
            drafted = accepted = 0
            prompts: list[int] = []
            speeds: list[float] = []
            for i in range(rounds):
                body = {
                    "model": model,
                    "messages": [{"role": "user", "content": content(i, label == "image")}],
                    "max_tokens": n_predict,
                    "temperature": 0,
                    "chat_template_kwargs": {"enable_thinking": False},
                    "speculative": {"n_max": n_max},
                }
                r = client.post(f"{endpoint}/v1/chat/completions", json=body)
                r.raise_for_status()
                timings = r.json()["timings"]
                drafted += int(timings.get("draft_n") or 0)
                accepted += int(timings.get("draft_n_accepted") or 0)
                prompts.append(int(timings["prompt_n"]) + int(timings.get("cache_n") or 0))
                speeds.append(float(timings["predicted_per_second"]))
            out[label] = {
                "requests": rounds,
                "drafted": drafted,
                "accepted": accepted,
                "acceptance": accepted / drafted if drafted else None,
                "prompt_tokens": sorted(prompts)[len(prompts) // 2],
                "decode_tok_s": sorted(speeds)[len(speeds) // 2],
            }
    return out


def section(rows: dict[str, Any] | None) -> list[str]:
    """The report's lines for ``measure``'s rows (none when not measured)."""
    if not rows:
        return []
    out = ["", "## Vision with MTP (acceptance with and without an image)", ""]
    out += [
        "| prompt | requests | prompt tokens | drafted | accepted | acceptance | decode tok/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for label in ("text", "image"):
        r = rows.get(label) or {}
        rate = r.get("acceptance")
        out.append(
            f"| {label} | {r.get('requests')} | {r.get('prompt_tokens')} | {r.get('drafted')} | {r.get('accepted')} "
            f"| {'-' if rate is None else f'{rate:.3f}'} | {r.get('decode_tok_s', 0):.1f} |"
        )
    return out
