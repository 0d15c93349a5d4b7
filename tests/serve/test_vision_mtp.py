"""Vision with MTP on (models.yaml ``mmproj``): the tiny MTP model with the tiny projector
(``orchestrator make-tiny-model --mmproj``), through the endpoint to a real llama-server.

An image in each API reaches llama-server as media: it adds a handful of prompt tokens (the
projector makes 4 embeddings of a 28 px image; its data URL as text would be hundreds), and the
answer's ``timings`` count draft tokens, so drafting stays on around it. A URL the server would
download is a 400 naming the part (``fetch_media_urls`` is off by default).
"""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import Stack, real_stack

pytestmark = [pytest.mark.native, pytest.mark.slow]


def png(rgb: tuple[int, int, int], size: int = 32) -> str:
    """A ``size`` x ``size`` PNG of one colour, base64."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\0" + bytes(rgb) * size for _ in range(size))
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return base64.b64encode(data).decode()


RED = png((220, 30, 30))
DATA_URL = f"data:image/png;base64,{RED}"
QUESTION = "What is in this picture?"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    from orchestrator.models.tiny_mmproj import write_tiny_mmproj

    tmp = tmp_path_factory.mktemp("vision")
    projector = write_tiny_mmproj(tmp / "mmproj-tiny.gguf")
    models = [{"name": "eyes", "ctx_size": 4096, "threads": 1, "mmproj": str(projector), "kv_persist": False}]
    s = real_stack(tmp, echo_model, bin_info, models=models)
    yield s
    s.close()


def post(stack: Stack, path: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"anthropic-version": "2023-06-01"}
    return httpx.post(stack.url + path, json={"model": "eyes", **body}, headers=headers, timeout=120)


def chat(stack: Stack, content: Any, max_tokens: int = 24) -> dict[str, Any]:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0}
    r = post(stack, "/v1/chat/completions", {**body, "chat_template_kwargs": {"enable_thinking": False}})
    assert r.status_code == 200, r.text
    return dict(r.json())


def with_image(text: str = QUESTION) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": DATA_URL}}]


def test_an_image_is_read_as_media_with_drafting_on(stack: Stack) -> None:
    """Chat completions: the image adds a few prompt tokens (media, not its URL as text) and the
    answer is drafted (``draft_n`` > 0), as the same question without it is."""
    text = chat(stack, QUESTION)
    image = chat(stack, with_image())
    extra = image["usage"]["prompt_tokens"] - text["usage"]["prompt_tokens"]
    assert 4 <= extra <= 12, (text["usage"], image["usage"])
    for answer in (text, image):
        timings = answer["timings"]
        assert timings["draft_n"] > 0 and timings["draft_n_accepted"] > 0, timings


def test_acceptance_with_and_without_an_image(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    """The MTP acceptance rate with and without an image in the prompt, on the CPU bed: the head
    reads the target's embeddings at the image's positions, so drafting after an image keeps its
    rate on this echo model (q = 0: every draft is right)."""
    rates = {}
    for label, content in (("text", QUESTION), ("image", with_image())):
        drafted = accepted = 0
        for i in range(3):
            timings = chat(stack, content if label == "image" else f"{QUESTION} {i}", max_tokens=48)["timings"]
            drafted, accepted = drafted + timings["draft_n"], accepted + timings["draft_n_accepted"]
        rates[label] = accepted / drafted
    with capsys.disabled():
        print(f"\nMTP acceptance: without an image {rates['text']:.2f}, with an image {rates['image']:.2f}")
    assert rates["image"] >= rates["text"] - 0.1, rates


def test_every_api_sends_its_image_as_media(stack: Stack) -> None:
    """Anthropic ``image`` blocks (base64), Responses ``input_image`` and Ollama ``images`` reach
    llama-server as media: each prompt is the text-only prompt plus a few tokens."""
    question = [{"type": "text", "text": QUESTION}]
    source = {"type": "base64", "media_type": "image/png", "data": RED}
    block = {"type": "image", "source": source}
    bodies = {
        "/v1/messages": lambda img: {
            "max_tokens": 8,
            "messages": [{"role": "user", "content": question + ([block] if img else [])}],
        },
        "/v1/responses": lambda img: {
            "max_output_tokens": 8,
            "input": [{"role": "user", "content": [{"type": "input_text", "text": QUESTION}]
                       + ([{"type": "input_image", "image_url": DATA_URL}] if img else [])}],
        },
        "/api/chat": lambda img: {
            "stream": False,
            "options": {"num_predict": 8},
            "messages": [{"role": "user", "content": QUESTION, **({"images": [RED]} if img else {})}],
        },
    }  # fmt: skip
    prompt = {
        "/v1/messages": lambda a: a["usage"]["input_tokens"] + a["usage"].get("cache_read_input_tokens", 0),
        "/v1/responses": lambda a: a["usage"]["input_tokens"],
        "/api/chat": lambda a: a["prompt_eval_count"],
    }
    for path, body in bodies.items():
        plain, image = post(stack, path, body(False)), post(stack, path, body(True))
        assert plain.status_code == 200 and image.status_code == 200, (path, plain.text, image.text)
        extra = prompt[path](image.json()) - prompt[path](plain.json())
        assert 4 <= extra <= 12, (path, plain.json(), image.json())


def test_a_url_the_server_would_download_is_refused_naming_the_part(stack: Stack) -> None:
    remote = [{"type": "image_url", "image_url": {"url": "http://169.254.169.254/latest/meta-data"}}]
    r = post(stack, "/v1/chat/completions", {"messages": [{"role": "user", "content": remote}], "max_tokens": 4})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "messages[0].content[0].image_url.url" and "data: URL" in error["message"]
