"""B75 on a model that has fill-in-the-middle tokens: ``/v1/completions`` with ``suffix`` goes to
llama-server's ``/infill`` and comes back in the OpenAI completion shape, whole and streamed.

The model is the echo tiny model with ``tokenizer.ggml.fim_{pre,suf,mid}_token_id`` added to its
GGUF metadata (three rare tokens of its vocabulary): llama-server then reads it as FIM-capable
(``llama_vocab_fim_pre`` and the others are set) and serves ``/infill``. The text means nothing
(an echo model); the route, the fields that reached llama-server and the shape are what is tested.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import Stack, real_stack

pytestmark = [pytest.mark.native, pytest.mark.slow]

# three rare tokens of the Qwen vocabulary the tiny model carries, as its FIM prefix, suffix and middle
FIM_IDS = {"tokenizer.ggml.fim_pre_token_id": 151640, "tokenizer.ggml.fim_suf_token_id": 151641,
           "tokenizer.ggml.fim_mid_token_id": 151642}  # fmt: skip
BODY = {"model": "coder", "prompt": "def f(x):\n    ", "suffix": "\n    return y\n", "max_tokens": 16, "temperature": 0}


def fim_model(src: Path, out: Path) -> Path:
    """A copy of the GGUF ``src`` with the FIM token ids of :data:`FIM_IDS` in its metadata."""
    import gguf

    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(out, arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF.") or field.name in FIM_IDS:
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    for key, token in FIM_IDS.items():
        writer.add_uint32(key, token)
    for tensor in reader.tensors:
        data = tensor.data
        writer.add_tensor_info(tensor.name, data.shape, data.dtype, data.nbytes, tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in reader.tensors:
        writer.write_tensor_data(tensor.data)
    writer.close()
    return out


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("fim")
    model = fim_model(echo_model, work / "echo-fim.gguf")
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
