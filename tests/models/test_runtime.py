"""The in-process runtime: llama_cpp bound to our native build, vocab-only load, tokenize,
and chat templates (with their raise_exception rules surfaced as errors)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from native_server import running_server

from orchestrator.errors import UserError
from orchestrator.models import runtime
from orchestrator.models.tiny import write_tiny_model
from orchestrator.native import fetch as native_fetch
from orchestrator.native.build import locate, pinned_source

SEP = "\n__ggml_vocab_test__\n"


@pytest.fixture(scope="module")
def source() -> Path:
    try:
        locate()
    except UserError as err:
        pytest.skip(f"{err} (the runtime loads libllama from the native build)")
    return pinned_source()


@pytest.fixture(scope="module")
def qwen_vocab(source: Path) -> runtime.Vocab:
    return runtime.load_vocab(source / "models/ggml-vocab-qwen35.gguf")


@pytest.fixture(scope="module")
def qwen35_template(source: Path) -> str:
    return (source / "models/templates/Qwen3.5-4B.jinja").read_text()


def test_vocab_facts(qwen_vocab: runtime.Vocab) -> None:
    assert qwen_vocab.n_vocab == 151_936
    assert qwen_vocab.eos_id == 151_643 and qwen_vocab.token_text(151_643) == "<|endoftext|>"
    assert qwen_vocab.tokenize("Hello world") == [9707, 1879]
    # control tokens are parsed by default (as llama-server's /tokenize does), or not
    assert qwen_vocab.tokenize("<|im_start|>user") == [151_644, 872]
    assert 151_644 not in qwen_vocab.tokenize("<|im_start|>user", parse_special=False)
    text = "Äpfel 🦙.cpp <|im_end|>"
    assert qwen_vocab.detokenize(qwen_vocab.tokenize(text)) == text


_BOUND = """
import json, sys
import llama_cpp
llm = llama_cpp.Llama(model_path=sys.argv[1], vocab_only=True, verbose=False)
maps = [line.split()[-1] for line in open("/proc/self/maps") if "/libllama.so" in line]
print(json.dumps({"version": llama_cpp.__version__, "libllama": sorted(set(maps)),
                  "tokens": llm.tokenize(b"Hello world", add_bos=False, special=False), "n_vocab": llm.n_vocab()}))
"""


def test_the_bindings_read_the_pinned_library(source: Path) -> None:
    """The runtime's llama-cpp-python 0.3.36 (bindings made for llama.cpp b11312) reads the pin's
    libllama (b11434, our build): in a fresh process bound to the build's folder, exactly that
    library is loaded, and the Qwen3.5 vocabulary's size and token ids are upstream's."""
    build = locate()
    assert build.manifest.get("upstream_build") == f"b{native_fetch.load_pin().build}" == "b11434"
    env = {**os.environ, "LLAMA_CPP_LIB_PATH": str(build.lib_dir)}
    argv = [sys.executable, "-c", _BOUND, str(source / "models/ggml-vocab-qwen35.gguf")]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=True)
    said = json.loads(out.stdout.strip().splitlines()[-1])
    assert said["version"] == "0.3.36"
    assert said["libllama"] == [str((build.lib_dir / "libllama.so").resolve())]
    assert (said["n_vocab"], said["tokens"]) == (151_936, [9707, 1879])


def test_load_vocab_is_cached_per_file(source: Path, qwen_vocab: runtime.Vocab) -> None:
    assert runtime.load_vocab(source / "models/ggml-vocab-qwen35.gguf") is qwen_vocab


def test_tokenizer_matches_the_upstream_reference(source: Path, qwen_vocab: runtime.Vocab) -> None:
    """llama.cpp ships expected token ids (from the Hugging Face tokenizer) beside the vocab;
    tests/test-tokenizer-0.cpp reads them the same way (no BOS, no special parsing)."""
    raw = (source / "models/ggml-vocab-qwen35.gguf.inp").read_text(encoding="utf-8")
    inputs = raw.split(SEP)
    if raw.endswith(SEP):
        inputs = inputs[:-1]
    expected = [
        [int(t) for t in line.split()]
        for line in (source / "models/ggml-vocab-qwen35.gguf.out").read_text().splitlines()
    ]
    assert len(inputs) == len(expected) >= 40
    for text, ids in zip(inputs, expected, strict=True):
        assert qwen_vocab.tokenize(text, parse_special=False) == ids, repr(text)


@pytest.mark.native
@pytest.mark.slow
def test_tokenize_agrees_with_llama_server(tmp_path_factory: pytest.TempPathFactory) -> None:
    model = write_tiny_model(tmp_path_factory.mktemp("tok") / "tiny.gguf")
    vocab = runtime.load_vocab(model)
    texts = ["Hello world", "<|im_start|>user\nhi<|im_end|>", " 3333333 ümlaut\t\n", ""]
    with running_server(model) as url:
        for text in texts:
            served = httpx.post(f"{url}/tokenize", json={"content": text}, timeout=10).json()["tokens"]
            assert vocab.tokenize(text) == served, repr(text)


def test_render_chat_uses_the_gguf_template(source: Path) -> None:
    prompt = runtime.render_chat(source / "models/ggml-vocab-qwen35.gguf", [{"role": "user", "content": "hi"}])
    assert prompt.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_a_gguf_without_template_is_a_clear_error(source: Path) -> None:
    with pytest.raises(UserError, match=r"no tokenizer\.chat_template"):
        runtime.render_chat(source / "models/ggml-vocab-falcon.gguf", [{"role": "user", "content": "hi"}])


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not found"):
        runtime.load_vocab(tmp_path / "nope.gguf")


def test_qwen35_generation_prompt_and_thinking(qwen35_template: str) -> None:
    msgs = [{"role": "system", "content": "  Be brief.  "}, {"role": "user", "content": "hi"}]
    thinking = runtime.render_template(qwen35_template, msgs)
    assert (
        thinking
        == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n"
    )
    plain = runtime.render_template(qwen35_template, msgs, enable_thinking=False)
    assert plain.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not runtime.render_template(qwen35_template, msgs, add_generation_prompt=False).endswith("assistant\n")


@pytest.mark.parametrize(
    ("messages", "rule"),
    [
        (
            [{"role": "user", "content": "a"}, {"role": "system", "content": "late"}],
            "System message must be at the beginning.",
        ),
        (
            [{"role": "system", "content": "a"}, {"role": "system", "content": "b"}, {"role": "user", "content": "c"}],
            "System message must be at the beginning.",
        ),
        ([{"role": "developer", "content": "a"}, {"role": "user", "content": "b"}], "Unexpected message role."),
        ([{"role": "assistant", "content": "a"}], "No user query found in messages."),
        ([], "No messages provided."),
        ([{"role": "user", "content": [{"kind": "x"}]}], "Unexpected item type in content."),
        ([{"role": "user", "content": 42}], "Unexpected content type."),
        (
            [{"role": "system", "content": [{"type": "image"}]}, {"role": "user", "content": "a"}],
            "System message cannot contain images.",
        ),
    ],
)
def test_template_rules_come_back_quoted(qwen35_template: str, messages: list[dict[str, object]], rule: str) -> None:
    with pytest.raises(runtime.ChatTemplateError) as err:
        runtime.render_template(qwen35_template, messages)  # type: ignore[arg-type]
    assert err.value.rule == rule
    assert rule in str(err.value)
    assert isinstance(err.value, UserError)


def test_a_broken_template_is_not_a_rule() -> None:
    with pytest.raises(runtime.ChatTemplateError) as err:
        runtime.render_template("{% for %}", [{"role": "user", "content": "a"}])
    assert err.value.rule is None and "does not parse" in str(err.value)


def test_vocabularies_still_loaded_at_exit_are_closed_quietly(source: Path) -> None:
    """A Vocab left to interpreter shutdown made llama_cpp's ``__del__`` print
    "Exception ignored ... 'NoneType' object is not callable"; they are closed at exit."""
    gguf = source / "models/ggml-vocab-qwen35.gguf"
    code = (
        "from orchestrator.models import runtime\n"
        f"v = runtime.load_vocab({str(gguf)!r})\n"
        f"w = runtime.Vocab(runtime.Path({str(gguf)!r}))\n"
        "assert v.tokenize('hi') == w.tokenize('hi')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
