"""The tiny MTP model generator: the construction, the files it writes, the CLI."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from orchestrator.cli.app import app
from orchestrator.config.load import load_config
from orchestrator.models import tiny as tm
from orchestrator.models import tiny_echo, tiny_weights
from orchestrator.models.facts import read_model_facts
from orchestrator.models.packing_writer import packing_writer

REPO = Path(__file__).resolve().parents[2]
MAX_BYTES = 25_000_000


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_code_has_minimum_distance_6() -> None:
    # cosine between two token embeddings = 1 - 2 * distance / 32 <= 0.625
    words = tiny_echo.codewords(1 << 21)
    if hasattr(np, "bitwise_count"):  # numpy >= 2
        weights = np.bitwise_count(words)
    else:
        weights = np.unpackbits(words.astype("<u4").view(np.uint8).reshape(-1, 4), axis=1).sum(axis=1)
    a, b = np.random.default_rng(0).integers(0, 1 << 21, size=(2, 1000))
    assert np.array_equal(words[a] ^ words[b], words[a ^ b])  # linear: distance(x, y) = weight(x ^ y)
    assert weights[1:].min() == 6  # so every two distinct codewords differ in >= 6 coordinates
    assert words[0] == 0 and set(np.unique(words & 1)) == {0, 1}  # bit 0 (the flag) varies


def test_the_writer_packs_a_big_array_once_and_never_returns_another_lists_bytes(tmp_path: Path) -> None:
    """The tiny writer keeps the packed bytes of big metadata arrays; a hit must be the same list."""
    import gguf

    plain = gguf.GGUFWriter(tmp_path / "plain.gguf", "llama")
    ours = packing_writer()(tmp_path / "ours.gguf", "llama")
    strings, array = ["tok", "en"] * 3000, gguf.GGUFValueType.ARRAY
    first = ours._pack_val(strings, array, True, gguf.GGUFValueType.STRING)
    assert first == plain._pack_val(strings, array, True, gguf.GGUFValueType.STRING)
    assert ours._pack_val(strings, array, True, gguf.GGUFValueType.STRING) is first  # packed once
    for round_ in range(20):  # new lists, often at a freed list's id: packed anew, never the old bytes
        del strings
        strings = [f"t{round_}", "x"] * 3000
        want = plain._pack_val(strings, array, True, gguf.GGUFValueType.STRING)
        assert ours._pack_val(strings, array, True, gguf.GGUFValueType.STRING) == want
    packed = ours._pack_val(strings, array, True, gguf.GGUFValueType.STRING)
    strings[0] = "changed in place"  # the same list object, other items: packed anew
    want = plain._pack_val(strings, array, True, gguf.GGUFValueType.STRING)
    assert ours._pack_val(strings, array, True, gguf.GGUFValueType.STRING) == want != packed
    strings.append("one more")
    want = plain._pack_val(strings, array, True, gguf.GGUFValueType.STRING)
    assert ours._pack_val(strings, array, True, gguf.GGUFValueType.STRING) == want
    small = ["a", "b"]  # small arrays and other values go through the plain writer
    assert ours._pack_val(small, array, True, gguf.GGUFValueType.STRING) == plain._pack_val(
        small, array, True, gguf.GGUFValueType.STRING
    )


@pytest.mark.native
def test_echo_map_counts_through_clean_tokens(pinned_source: Path) -> None:
    emap = tm.load_echo_map(0.2, seed=0)
    clean = emap.clean
    n_vocab = len(emap.successor)
    assert n_vocab == 151936
    # f is one cycle over the clean tokens: the next clean id, wrapping
    assert np.array_equal(emap.successor[clean], np.roll(clean, -1))
    assert set(np.unique(emap.successor)) == set(clean.tolist())
    # never a control/EOG token (ids from the Qwen vocab; '</s>' is EOG by name in llama-vocab.cpp)
    for special in (151643, 151644, 151645, 128247):
        assert special not in set(clean.tolist())
        assert emap.successor[special] != special
    assert emap.successor[1879] == 1880  # " world" -> the next id
    # exactly round(q * n) clean tokens flagged; flags nest as q grows
    assert emap.flagged[clean].sum() == round(0.2 * len(clean))
    smaller = tm.load_echo_map(0.1, seed=0)
    assert not np.any(smaller.flagged & ~emap.flagged)
    assert not emap.flagged[emap.junk]


@pytest.mark.native
def test_trunk_and_head_argmax_are_exact_after_quantisation(pinned_source: Path) -> None:
    """Numerically: the trunk's logits (output . normed embedding) pick f(t), with margin."""
    import gguf

    vocab = tm._load_vocab()
    w = tiny_weights.build_weights(vocab.clean, vocab.n_vocab, "echo", 0.2, 0, dense=False)
    q8 = gguf.GGMLQuantizationType.Q8_0
    embd = gguf.quants.dequantize(gguf.quants.quantize(w.tensors["token_embd.weight"][0], q8), q8)
    out = gguf.quants.dequantize(gguf.quants.quantize(w.tensors["output.weight"][0], q8), q8)
    emap = tiny_echo.echo_map(vocab.clean, vocab.n_vocab, 0.2, 0)
    sample = np.concatenate(
        [np.arange(0, 260), np.random.default_rng(1).choice(vocab.n_vocab, 300, replace=False), [151643, 151645]]
    )
    h = embd[sample] / np.sqrt((embd[sample] ** 2).mean(axis=1, keepdims=True)) * tiny_weights.OUTPUT_NORM
    logits = h @ out.T
    assert np.array_equal(logits.argmax(axis=1), emap.successor[sample])
    top2 = np.sort(logits, axis=1)[:, -2:]
    assert (top2[:, 1] - top2[:, 0]).min() > 30  # logits
    # the flag lives in embedding coordinate 0
    assert np.array_equal(embd[sample, 0] > 0, emap.flagged[sample])


@pytest.mark.native
def test_same_arguments_same_bytes_and_size_limit(tmp_path: Path, pinned_source: Path) -> None:
    a = tm.write_tiny_model(tmp_path / "a.gguf", q=0.1, seed=3)
    b = tm.write_tiny_model(tmp_path / "b.gguf", q=0.1, seed=3)
    c = tm.write_tiny_model(tmp_path / "c.gguf", q=0.1, seed=4)
    assert sha256(a) == sha256(b) != sha256(c)
    assert a.stat().st_size <= MAX_BYTES
    assert oct(a.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    assert not list(tmp_path.glob(".*.tmp"))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.native
@pytest.mark.parametrize("variant", ["embedded", "dense", "separate"])
def test_layout_facts(tmp_path: Path, pinned_source: Path, variant: str) -> None:
    out = tm.write_tiny_model(tmp_path / f"{variant}.gguf", variant=variant)
    facts = read_model_facts(out)
    assert facts.architecture == ("qwen35" if variant == "dense" else "qwen35moe")
    assert facts.file_size <= MAX_BYTES
    assert facts.trunk_layers == 4 and facts.attention_layers == 1 and facts.recurrent_layers == 3
    assert facts.tokenizer.vocab_size == 151936 and facts.tokenizer.pre == "qwen35"
    assert facts.chat_template.family == "qwen3.5"
    assert set(facts.tensor_types) == {"Q8_0", "F32"} and facts.tensor_types["Q8_0"].count == 2
    if variant == "dense":
        assert facts.expert_count is None
    else:
        assert (facts.expert_count, facts.expert_used_count) == (4, 2)
    if variant == "separate":
        assert facts.mtp == "none" and facts.block_count == 4
        draft = read_model_facts(tm.draft_path(out))
        assert draft.mtp == "draft-only" and draft.nextn_layers == 1 and draft.block_count == 5
        assert draft.file_size <= MAX_BYTES
        assert not any(n.startswith("blk.0.") for n in _tensor_names(tm.draft_path(out)))
    else:
        assert facts.mtp == "embedded" and facts.nextn_layers == 1 and facts.block_count == 5
        assert "blk.4.nextn.eh_proj.weight" in _tensor_names(out)


def _tensor_names(path: Path) -> set[str]:
    from orchestrator.models.gguf_header import read_header

    return {t.name for t in read_header(path).tensors}


@pytest.mark.native
def test_random_mode_writes_a_different_model(tmp_path: Path, pinned_source: Path) -> None:
    echo = tm.write_tiny_model(tmp_path / "echo.gguf")
    rand = tm.write_tiny_model(tmp_path / "rand.gguf", mode="random")
    assert sha256(echo) != sha256(rand)
    assert read_model_facts(rand).mtp == "embedded"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"mode": "copy"}, "unknown tiny-model mode"),
        ({"variant": "split"}, "unknown tiny-model variant"),
        ({"q": 1.0}, "q must be in [0, 1)"),
        ({"q": -0.1}, "q must be in [0, 1)"),
    ],
)
def test_bad_arguments_are_user_errors(tmp_path: Path, kwargs: dict[str, Any], needle: str) -> None:
    from orchestrator.errors import UserError

    with pytest.raises(UserError, match=needle.replace("[", r"\[").replace(")", r"\)")):
        tm.write_tiny_model(tmp_path / "x.gguf", **kwargs)


@pytest.mark.native
def test_demo_model_is_cached_and_versioned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pinned_source: Path
) -> None:
    monkeypatch.setenv("ORCHESTRATOR_CACHE", str(tmp_path / "cache"))
    path = tm.demo_model()
    assert path.is_file() and f"v{tm.GENERATOR_VERSION}" in path.name
    stamp = path.stat().st_mtime_ns
    assert tm.demo_model() == path and path.stat().st_mtime_ns == stamp  # not rewritten
    facts = read_model_facts(path)
    assert facts.mtp == "embedded"
    monkeypatch.setattr(tm, "GENERATOR_VERSION", tm.GENERATOR_VERSION + 1)
    assert tm.demo_model() != path  # a new generator writes a new file


@pytest.mark.native
def test_cli_make_tiny_model(tmp_path: Path, pinned_source: Path, bin_info: Any) -> None:
    out = tmp_path / "cli.gguf"
    res = CliRunner().invoke(app, ["make-tiny-model", str(out), "--q", "0.2", "--variant", "separate"])
    assert res.exit_code == 0, res.output
    assert out.is_file() and tm.draft_path(out).is_file()
    assert "-md" in res.output  # prints how to serve it
    served_by = res.output.split("Serve it with:\n  ", 1)[1].split(" -m ", 1)[0]
    assert served_by == str(bin_info.server) and os.access(served_by, os.X_OK)  # the built one: none is on PATH
    assert f"path: {out.resolve()}" in res.output  # or through `orchestrator up`
    # the printed entry joins the shipped models.yaml as it says, with no clash of names
    entry = res.output.split("behind the endpoint: `", 1)[1].split("`", 1)[0]
    shipped = (Path(__file__).resolve().parents[2] / "models.yaml").read_text()
    joined = tmp_path / "models.yaml"
    joined.write_text(shipped.replace("models:\n", f"models:\n  {entry}\n", 1))
    assert load_config(joined).models[0].name == "local-cli"
    bad = CliRunner().invoke(app, ["make-tiny-model", str(tmp_path / "bad.gguf"), "--q", "1.5"])
    assert bad.exit_code == 2
    assert "q must be in [0, 1)" in bad.output and "Traceback" not in bad.output


@pytest.mark.native
def test_command_in_a_fresh_process(tmp_path: Path, pinned_source: Path) -> None:
    out = tmp_path / "script.gguf"
    res = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.app", "make-tiny-model", str(out), "--mode", "echo", "--q", "0.1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert sha256(out) == sha256(tm.write_tiny_model(tmp_path / "same.gguf", q=0.1))


@pytest.mark.native
def test_echo_model_generates_the_successor_chain(llama_server: Any, echo_model: Path) -> None:
    server = llama_server(echo_model)
    prompt = server.post("/tokenize", {"content": "Hello world"})["tokens"]
    res = server.post(
        "/completion", {"prompt": "Hello world", "n_predict": 32, "temperature": 0, "return_tokens": True}
    )
    emap = tm.load_echo_map(0.0)
    want = [int(emap.successor[prompt[-1]])]
    while len(want) < 32:
        want.append(int(emap.successor[want[-1]]))
    assert res["tokens"] == want
    assert res["stop_type"] == "limit"  # never an EOG token


@pytest.mark.native
def test_random_model_serves_and_rarely_agrees_with_its_head(
    llama_server: Any, tmp_path: Path, pinned_source: Path
) -> None:
    rand = tm.write_tiny_model(tmp_path / "rand.gguf", mode="random")
    server = llama_server(rand, "--spec-type", "draft-mtp", "--spec-draft-n-max", "2")
    t = server.post("/completion", {"prompt": "Hello", "n_predict": 32, "temperature": 0, "ignore_eos": True})[
        "timings"
    ]
    assert t["draft_n"] > 0
    assert t["draft_n_accepted"] < t["draft_n"] / 2
