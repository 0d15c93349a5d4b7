"""GGUF model facts (``orchestrator inspect``): header-only reading, MTP head detection, errors,
split files and the memory estimate (checked against what llama-server allocates)."""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from typer.testing import CliRunner

from orchestrator.cli.app import app
from orchestrator.errors import UserError
from orchestrator.models.facts import read_model_facts, split_parts, template_family
from orchestrator.models.memory import estimate_memory

runner = CliRunner()


def write_header_only(
    path: Path, arch: str, tensors: dict[str, tuple[tuple[int, ...], Any]], kv: dict[str, Any] | None = None
) -> int:
    """Write a GGUF whose tensor data region is a sparse hole: header + tensor infos, then
    ``truncate`` to the full size. ``tensors`` maps name -> (numpy-order shape, qtype).
    Returns the file size in bytes."""
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in (kv or {}).items():
        if isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, list):
            w.add_array(key, value)
        else:
            w.add_uint32(key, value)
    end = 0
    for name, (shape, qtype) in tensors.items():
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        nbytes = int(np.prod(shape)) // block * size
        w.add_tensor_info(name, shape, np.dtype(np.float32), nbytes, raw_dtype=qtype)
        end += -(-nbytes // 32) * 32
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    header = path.stat().st_size
    total = -(-header // 32) * 32 + end
    with open(path, "r+b") as f:
        f.truncate(total)
    return total


def _rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux /proc/self/io")
def test_reading_facts_never_reads_tensor_data(tmp_path: Path) -> None:
    path = tmp_path / "sparse.gguf"
    four_gib = (1 << 15, 1 << 15)  # F32: 4 GiB of data, all of it a hole
    size = write_header_only(
        path,
        "qwen35moe",
        {
            "token_embd.weight": (four_gib, gguf.GGMLQuantizationType.F32),
            "blk.0.attn_norm.weight": ((64,), gguf.GGMLQuantizationType.F32),
        },
        {"qwen35moe.block_count": 1},
    )
    assert size > 4 << 30
    before = _rchar()
    facts = read_model_facts(path)
    read = _rchar() - before
    assert facts.file_size == size
    assert facts.weights_bytes == (4 << 30) + 256
    assert facts.parameter_count == (1 << 30) + 64
    assert read < 4 << 20, f"read {read:,} bytes of a {size:,}-byte file"


@pytest.mark.native
def test_facts_of_the_echo_model(echo_model: Path) -> None:
    f = read_model_facts(echo_model)
    assert (f.architecture, f.mtp, f.mtp_message) == ("qwen35moe", "embedded", None)
    assert (f.block_count, f.trunk_layers, f.nextn_layers) == (5, 4, 1)
    assert (f.attention_layers, f.recurrent_layers) == (1, 3)
    assert (f.expert_count, f.expert_used_count) == (4, 2)
    assert f.context_length == 4096 and f.embedding_length == 32
    assert f.file_size == echo_model.stat().st_size and f.split_count == 1
    assert f.tensor_types["Q8_0"].count == 2 and f.tensor_types["Q8_0"].bytes == 2 * 151936 * 34
    assert f.nextn_bytes > 0 and f.weights_bytes > f.nextn_bytes
    assert f.chat_template.present and f.chat_template.family == "qwen3.5" and len(f.chat_template.sha256 or "") == 12
    tok = f.tokenizer
    assert (tok.model, tok.vocab_size, tok.eos_id, tok.eos_text) == ("gpt2", 151936, 151643, "<|endoftext|>")


@pytest.mark.native
def test_facts_of_the_pinned_vocab_file(pinned_source: Path) -> None:
    f = read_model_facts(pinned_source / "models" / "ggml-vocab-qwen35.gguf")
    assert f.architecture == "qwen2" and f.mtp == "none" and f.nextn_layers == 0
    assert f.parameter_count == 0 and f.tensor_types == {}
    assert f.tokenizer.vocab_size == 151936 and f.tokenizer.bos_text == "<|endoftext|>"
    assert f.chat_template.family == "chatml"  # its own older Qwen2 template


@pytest.mark.native
def test_separate_draft_file_is_recognised(tiny_dir: Path, pinned_source: Path) -> None:
    from orchestrator.models.tiny import draft_path, write_tiny_model

    trunk = write_tiny_model(tiny_dir / "facts-separate.gguf", variant="separate")
    draft = read_model_facts(draft_path(trunk))
    assert draft.mtp == "draft-only" and "-md" in (draft.mtp_message or "")
    assert read_model_facts(trunk).mtp == "none"


def test_fork_mtp_architecture_is_reported_unsupported(tmp_path: Path) -> None:
    path = tmp_path / "fork.gguf"
    write_header_only(
        path, "qwen35moe_mtp", {}, {"qwen35moe_mtp.block_count": 41, "qwen35moe_mtp.nextn_predict_layers": 1}
    )
    f = read_model_facts(path)
    assert f.mtp == "unsupported"
    assert "qwen35moe" in (f.mtp_message or "") and "draft-mtp" in (f.mtp_message or "")


def test_stripped_head_is_not_reported_as_mtp(tmp_path: Path) -> None:
    path = tmp_path / "stripped.gguf"
    f32 = gguf.GGMLQuantizationType.F32
    write_header_only(
        path,
        "qwen35moe",
        {"blk.0.attn_norm.weight": ((8,), f32)},
        {"qwen35moe.block_count": 2, "qwen35moe.nextn_predict_layers": 1},
    )
    f = read_model_facts(path)
    assert f.mtp == "none" and "stripped" in (f.mtp_message or "")


def test_split_files_are_listed_and_summed(tmp_path: Path) -> None:
    f32 = gguf.GGMLQuantizationType.F32
    sizes = []
    for i in (1, 2, 3):
        kv: dict[str, Any] = {"split.no": i - 1, "split.count": 3}
        if i == 1:
            kv["qwen35moe.block_count"] = 3
        sizes.append(
            write_header_only(
                tmp_path / f"big-{i:05d}-of-00003.gguf",
                "qwen35moe",
                {f"blk.{i - 1}.attn_norm.weight": ((1024,), f32)},
                kv,
            )
        )
    second = tmp_path / "big-00002-of-00003.gguf"
    f = read_model_facts(second)  # any part names the whole model
    assert f.split_count == 3 and [p.name for p in f.files] == [f"big-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
    assert f.file_size == sum(sizes) and f.parameter_count == 3 * 1024
    second.unlink()
    with pytest.raises(UserError, match="split part 2 of 3 is missing"):
        read_model_facts(tmp_path / "big-00001-of-00003.gguf")
    assert split_parts(tmp_path / "plain.gguf") == [tmp_path / "plain.gguf"]


@pytest.mark.native
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p, src: None, "no such file"),
        (lambda p, src: p.write_text("hello, not a model\n"), "not a GGUF file"),
        (lambda p, src: p.write_bytes(b"GGUF" + struct.pack("<I", 1) + bytes(16)), "unsupported GGUF version 1"),
        (lambda p, src: p.write_bytes(src.read_bytes()[:1000]), "truncated GGUF header"),
        (lambda p, src: p.write_bytes(src.read_bytes()[: src.stat().st_size // 2]), "truncated GGUF file"),
    ],
    ids=["missing", "not-gguf", "version-1", "truncated-header", "truncated-data"],
)
def test_bad_files_give_one_line_errors(tmp_path: Path, echo_model: Path, make: Any, message: str) -> None:
    path = tmp_path / "bad.gguf"
    make(path, echo_model)
    with pytest.raises(UserError, match=message):
        read_model_facts(path)
    res = runner.invoke(app, ["inspect", str(path)])
    assert res.exit_code == 2
    assert "Traceback" not in res.output
    first = res.output.strip().splitlines()[0]
    assert first.startswith("error: ") and message in first and str(path) in first


@pytest.mark.native
def test_truncated_copy_through_the_real_cli_process(tmp_path: Path, echo_model: Path) -> None:
    import subprocess
    import sys

    copy = tmp_path / "copy.gguf"
    shutil.copyfile(echo_model, copy)
    with open(copy, "r+b") as f:
        f.truncate(copy.stat().st_size - 4096)
    res = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.app", "inspect", str(copy)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 2
    assert "truncated GGUF file" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.native
def test_inspect_json_and_table(echo_model: Path) -> None:
    res = runner.invoke(app, ["inspect", str(echo_model), "--json", "--ctx", "2048"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["architecture"] == "qwen35moe" and data["mtp"] == "embedded"
    assert data["memory"]["ctx"] == 2048 and data["memory_mtp"]["draft_n_max"] == 3
    assert (
        data["memory"]["total"]
        == data["memory"]["weights"] + data["memory"]["kv_cache"] + data["memory"]["recurrent_state"]
    )
    table = runner.invoke(app, ["inspect", str(echo_model)])
    assert table.exit_code == 0
    for needle in ("qwen35moe", "embedded", "qwen3.5", "151,936 tokens", "2 of 4 used"):
        assert needle in table.output


@pytest.mark.native
def test_memory_formula_by_hand(echo_model: Path) -> None:
    f = read_model_facts(echo_model)
    m = estimate_memory(f, 1000)
    assert m.kv_cache == 1000 * 1 * 1 * (16 + 16) * 2  # ctx * attn layers * kv heads * (k + v) * f16
    assert m.recurrent_state == 3 * ((4 - 1) * (32 + 2 * 1 * 16) + 16 * 32) * 4  # F32 conv + delta states
    assert m.weights == f.weights_bytes - f.nextn_bytes  # NextN not loaded without --spec-type
    mm = estimate_memory(f, 1000, n_parallel=2, kv_type="q8_0", draft_n_max=3)
    # the trunk's attention layer in q8_0 (34 bytes / 32), the NextN layer's own draft KV in f16
    assert mm.kv_cache == int(1000 * 1 * (32 * 34 / 32 + 32 * 2))
    assert mm.recurrent_state == m.recurrent_state * 2 * 4
    assert mm.weights == f.weights_bytes
    with pytest.raises(UserError, match="unknown KV cache type"):
        estimate_memory(f, 1000, kv_type="q3_k")


@pytest.mark.native
def test_memory_estimate_matches_llama_server(llama_server: Any, echo_model: Path) -> None:
    ctx, n_par, n_max = 65536, 4, 8
    server = llama_server(
        echo_model, "--spec-type", "draft-mtp", "--spec-draft-n-max", str(n_max), "-np", str(n_par), "-v", ctx=ctx
    )
    # the log holds fit probes first; the real target context comes right before the MTP one
    before, after = server.log().rsplit("creating MTP draft context", 1)
    kv_re = r"llama_kv_cache: size =\s*([\d.]+) MiB"
    rs_re = r"llama_memory_recurrent: size =.*R \(f32\):\s*([\d.]+) MiB, S \(f32\):\s*([\d.]+) MiB"
    target_kv = float(re.findall(kv_re, before)[-1])
    draft_kv = float(re.findall(kv_re, after)[0])
    r, s = (float(x) for x in re.findall(rs_re, before)[-1])
    m = estimate_memory(read_model_facts(echo_model), ctx, n_parallel=n_par, draft_n_max=n_max)
    mib = 1 << 20
    assert m.kv_cache / mib == pytest.approx(target_kv + draft_kv, abs=0.01)
    assert m.recurrent_state / mib == pytest.approx(r + s, abs=0.01)


def test_template_family_marks() -> None:
    assert template_family("no chatml here") is None
    assert template_family("<|im_start|>{{ x }}") == "chatml"
    assert template_family("<|im_start|><think>") == "qwen3"
    assert template_family("<|im_start|><function=") == "qwen3-coder"


@pytest.mark.native
def test_render_prompt_after_request_repair(tmp_path: Path, echo_model: Path) -> None:
    pytest.importorskip("orchestrator.models.runtime")
    msgs = tmp_path / "messages.json"
    msgs.write_text(json.dumps([{"role": "user", "content": "hi"}, {"role": "developer", "content": "be brief"}]))
    res = runner.invoke(app, ["inspect", str(echo_model), "--render", str(msgs)])
    assert res.exit_code == 0, res.output
    # the late developer message stays where it stands (system_messages: in_place, the default), as a
    # <system-reminder> inside the user turn it follows, so the template accepts it and the prefix
    # rendered before it never changes
    assert res.output.startswith("<|im_start|>user\nhi\n\n<system-reminder>\nbe brief\n</system-reminder><|im_end|>")
    assert res.output.rstrip("\n").endswith("<think>")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    res = runner.invoke(app, ["inspect", str(echo_model), "--render", str(bad)])
    assert res.exit_code == 2 and "not valid JSON" in res.output


@pytest.mark.native
def test_inspect_ctx_zero_is_refused_not_replaced_by_the_default(echo_model: Path) -> None:
    # `--ctx 0` used to print the estimate for the default context (4,096) as if it were asked for
    res = runner.invoke(app, ["inspect", str(echo_model), "--ctx", "0"])
    assert res.exit_code == 2
    assert "context length must be positive, got 0" in res.output


@pytest.mark.native
def test_render_of_deeply_nested_json_is_one_line(tmp_path: Path, echo_model: Path) -> None:
    # json.loads raised RecursionError straight through the CLI
    messages = tmp_path / "deep.json"
    messages.write_text("[" * 100_000 + "]" * 100_000)
    res = runner.invoke(app, ["inspect", str(echo_model), "--render", str(messages)])
    assert res.exit_code == 2
    assert "JSON nested too deeply to read" in res.output


def test_inspect_a_projector_says_what_mmproj_needs(tmp_path: Path) -> None:
    """A projector GGUF (``make-tiny-model --mmproj``) shows its type, the width it projects to and
    the tokens an image becomes, not a model's rows (layers, tokenizer, KV)."""
    from orchestrator.models.tiny_mmproj import write_tiny_mmproj

    path = write_tiny_mmproj(tmp_path / "mmproj-tiny.gguf")
    res = runner.invoke(app, ["inspect", str(path), "--json"])
    assert res.exit_code == 0, res.output
    projector = json.loads(res.output)["projector"]
    assert projector["type"] == "mlp" and projector["vision"] and projector["projection_dim"] == 32
    assert projector["tokens_per_image"] == 4
    table = runner.invoke(app, ["inspect", str(path)])
    assert table.exit_code == 0 and "projects to" in table.output and "tokenizer" not in table.output
