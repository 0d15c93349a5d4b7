"""B75 on a model that has fill-in-the-middle tokens: ``/v1/completions`` with ``suffix`` goes to
llama-server's ``/infill`` and comes back in the OpenAI completion shape, whole and streamed.

The model is the echo tiny model with ``tokenizer.ggml.fim_{pre,suf,mid}_token_id`` added to its
GGUF metadata (three rare tokens of its vocabulary): llama-server then reads it as FIM-capable
(``llama_vocab_fim_pre`` and the others are set) and serves ``/infill``. The text means nothing
(an echo model); the route, the fields that reached llama-server and the shape are what is tested.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import Stack, real_stack

from orchestrator.models.gguf_header import read_header

pytestmark = [pytest.mark.native, pytest.mark.slow]

# three rare tokens of the Qwen vocabulary the tiny model carries, as its FIM prefix, suffix and middle
FIM_IDS = {"tokenizer.ggml.fim_pre_token_id": 151640, "tokenizer.ggml.fim_suf_token_id": 151641,
           "tokenizer.ggml.fim_mid_token_id": 151642}  # fmt: skip
BODY = {"model": "coder", "prompt": "def f(x):\n    ", "suffix": "\n    return y\n", "max_tokens": 16, "temperature": 0}


def fim_model(src: Path, out: Path) -> Path:
    """A copy of the GGUF ``src`` with the FIM token ids of :data:`FIM_IDS` added to its metadata.

    Byte for byte (``gguf.GGUFReader`` takes about 10 s on the tokenizer's 300,000 strings): the
    preamble with 3 more keys, the keys as they are, the 3 new ones (u32 values), the tensor infos
    as they are (their offsets count from the data section), padding to the alignment, the data."""
    header = read_header(src, keep_string_arrays=())
    assert not any(key in header.metadata for key in FIM_IDS)
    infos = sum(8 + len(t.name.encode()) + 4 + 8 * len(t.shape) + 4 + 8 for t in header.tensors)
    kv_end = header.header_bytes - infos
    align = int(header.metadata.get("general.alignment", 32))
    raw = src.read_bytes()
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", raw)
    added = b"".join(
        struct.pack("<Q", len(key)) + key.encode() + struct.pack("<II", 4, token) for key, token in FIM_IDS.items()
    )  # value type 4: UINT32
    head = struct.pack("<4sIQQ", magic, version, n_tensors, n_kv + len(FIM_IDS)) + raw[24:kv_end] + added
    head += raw[kv_end : header.header_bytes]
    out.write_bytes(head + b"\0" * (-len(head) % align) + raw[header.data_offset :])
    return out


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("fim")
    model = fim_model(echo_model, work / "echo-fim.gguf")
    copied = read_header(model, keep_string_arrays=())
    assert {key: copied.metadata[key] for key in FIM_IDS} == FIM_IDS
    assert copied.tensors == read_header(echo_model, keep_string_arrays=()).tensors
    models = [{"name": "coder", "parallel": 1, "ctx_size": 2048, "threads": 1}]
    s = real_stack(work, model, bin_info, models=models)
    yield s
    s.close()


def test_suffix_fills_the_middle_through_infill(stack: Stack) -> None:
    stack.recorder.clear()
    r = httpx.post(stack.url + "/v1/completions", json=BODY, timeout=120)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["object"] == "text_completion" and answer["model"] == "coder"
    (choice,) = answer["choices"]
    assert isinstance(choice["text"], str) and choice["finish_reason"] in ("stop", "length")
    assert answer["usage"]["completion_tokens"] > 0 and answer["usage"]["prompt_tokens"] > 0
    (sent,) = stack.recorder.bodies("/infill")
    assert (sent["input_prefix"], sent["input_suffix"], sent["prompt"]) == (BODY["prompt"], BODY["suffix"], "")
    assert "suffix" not in sent
    # the same through the stream: completion chunks, the finish reason last, then [DONE]
    with httpx.stream("POST", stack.url + "/v1/completions", json={**BODY, "stream": True}, timeout=120) as s:
        lines = [line for line in s.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert all(c["object"] == "text_completion" and c["id"] == chunks[0]["id"] for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    streamed = "".join(c["choices"][0]["text"] for c in chunks)
    assert streamed == choice["text"]  # greedy: the same fill, whole or streamed
