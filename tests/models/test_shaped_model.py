"""The shaped model generator: real Qwen3.6-35B-A3B shapes, block encoders, routing spread, echo acceptance."""

from __future__ import annotations

import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from orchestrator.cli.app import app
from orchestrator.models import gguf_write as gw
from orchestrator.models import shaped, tiny
from orchestrator.models import shaped_echo as se
from orchestrator.models.gguf_header import read_header
from orchestrator.models.qblocks import encode
from orchestrator.models.shapes import QWEN36_35B_A3B, Shape

sys.path.insert(0, str(Path(__file__).parent))
from test_spec_decoding import simulate_n_max_1


def inspect_json(path: Path) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["inspect", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.output)
    return data.get("facts", data)


def assert_dims(facts: dict[str, Any], header_path: Path, sh: Shape) -> None:
    """What `orchestrator inspect --json` and the tensor shapes say equals the preset."""
    assert facts["architecture"] == "qwen35moe"
    assert facts["embedding_length"] == sh.n_embd
    assert (facts["trunk_layers"], facts["nextn_layers"], facts["block_count"]) == (sh.n_layer, 1, sh.n_layer + 1)
    assert facts["attention_layers"] == sh.n_layer // 4 and facts["recurrent_layers"] == sh.n_layer * 3 // 4
    assert (facts["head_count"], facts["head_count_kv"]) == (sh.n_head, sh.n_head_kv)
    assert facts["key_length"] == facts["value_length"] == sh.head_dim
    assert facts["ssm"] == {
        "conv_kernel": sh.ssm_conv,
        "inner_size": sh.ssm_inner,
        "state_size": sh.ssm_state,
        "time_step_rank": sh.ssm_dt_rank,
        "group_count": sh.ssm_groups,
    }
    assert (facts["expert_count"], facts["expert_used_count"]) == (sh.n_expert, sh.n_expert_used)
    assert facts["tokenizer"]["vocab_size"] == sh.n_vocab
    assert facts["context_length"] == sh.context_length
    assert facts["mtp"] == "embedded"
    shapes = {t.name: t.shape for t in read_header(header_path).tensors}
    assert shapes["output.weight"] == shapes["token_embd.weight"] == (sh.n_embd, sh.n_vocab)
    assert shapes["blk.0.ffn_gate_exps.weight"] == (sh.n_embd, sh.n_ff_exp, sh.n_expert)
    assert shapes["blk.0.ffn_down_shexp.weight"] == (sh.n_ff_shexp, sh.n_embd)
    assert shapes[f"blk.{sh.n_layer}.nextn.eh_proj.weight"] == (2 * sh.n_embd, sh.n_embd)


@pytest.mark.native
def test_full_preset_header_reads_back_as_the_real_model(tmp_path: Path, pinned_source: Path) -> None:
    """The full-size header (data left as one hole: nothing written) has the real dimensions and
    about 35 B parameters, 3 B of them active per token."""
    sh = QWEN36_35B_A3B
    vocab = tiny._load_vocab()
    echo = se.build(sh, vocab.n_vocab, vocab.clean, 0.1, 0)
    specs = [gw.TensorSpec(t.name, t.shape, t.type_name) for t in shaped.tensor_specs(sh, "q4_k_m", echo)]
    path = tmp_path / "full-header.gguf"
    gw.write_gguf(path, shaped.metadata(sh, "q4_k_m", vocab.kv, "{{ messages }}", {"q": 0.1}), specs)
    facts = inspect_json(path)
    assert_dims(facts, path, sh)
    assert 34.5e9 < facts["parameter_count"] < 36.5e9
    assert 19e9 < facts["file_size"] < 23e9  # published Q4_K files: about 19-23 GB
    assert os.stat(path).st_blocks * 512 < 50e6  # sparse: only the header is on disk
    types = {t.name: t.type_name for t in read_header(path).tensors}
    assert types["output.weight"] == "Q6_K" and types["token_embd.weight"] == "Q4_K"
    assert types["blk.0.ffn_down_exps.weight"] == "Q6_K" and types["blk.5.ffn_down_exps.weight"] == "Q4_K"
    assert types["blk.0.ffn_gate_inp.weight"] == types["blk.0.ssm_conv1d.weight"] == "F32"


@pytest.mark.parametrize("type_name", ["F16", "Q8_0", "Q4_K", "Q6_K"])
def test_block_encoders_round_trip_through_gguf(type_name: str) -> None:
    """Codewords, spikes and zeros come back (nearly) exactly through the gguf package's decoders."""
    import gguf

    rng = np.random.default_rng(0)
    x = np.zeros((40, 512), dtype=np.float32)
    x[:, :32] = np.where(rng.random((40, 32)) < 0.5, -1.0, 1.0) / np.sqrt(32)
    x[:, 32:256] = rng.standard_normal((40, 224)) / np.sqrt(224)
    x[3], x[4] = 0.0, 0.0
    x[3, 0], x[4, 0] = 16.0, -22.6
    y = gguf.quants.dequantize(encode(x, type_name), getattr(gguf.GGMLQuantizationType, type_name))
    assert np.abs(y[:, 256:]).max() == 0.0  # zero blocks stay zero
    assert np.abs(y - x).max() < 0.05
    assert np.sign(y[:, 0]).tolist() == np.sign(x[:, 0]).tolist()


@pytest.mark.native
def test_routing_spreads_a_verification_batch_over_experts(pinned_source: Path) -> None:
    """Along the echo chain, each window of 5 tokens (a draft of 4 being verified) selects about
    as many distinct experts per layer as 5 independent uniform choices of 8 of 256 (37.6)."""
    sh = QWEN36_35B_A3B
    vocab = tiny._load_vocab()
    echo = se.build(sh, vocab.n_vocab, vocab.clean, 0.1, 0)
    emap = tiny.echo_map(vocab.clean, vocab.n_vocab, 0.1, 0)
    chain = [int(vocab.clean[1000])]
    for _ in range(399):
        chain.append(int(emap.successor[chain[-1]]))
    x = np.concatenate([se.embd_rows(echo, t, t + 1) for t in chain])  # residual = embedding (zero trunk)
    distinct, load = [], np.zeros(sh.n_expert)
    for layer in (0, 17, 39):
        logits = x @ se.router_rows(echo, layer, 0, sh.n_expert).T
        top = np.argsort(-logits, axis=1)[:, : sh.n_expert_used]
        np.add.at(load, top.ravel(), 1)
        distinct += [len(np.unique(top[i : i + 5])) for i in range(0, len(chain) - 5, 5)]
    expected = sh.n_expert * (1 - (1 - sh.n_expert_used / sh.n_expert) ** 5)
    assert abs(np.mean(distinct) - expected) < 1.5, (np.mean(distinct), expected)
    assert load.max() < 3 * load.mean() and (load > 0).mean() > 0.95  # no hot or dead experts


@pytest.mark.native
def test_trunk_and_head_pick_the_echo_tokens_after_quantisation(pinned_source: Path) -> None:
    """Numerically, with the Q4_K/Q6_K bytes the file holds: the trunk's argmax is f(t); the
    head's draft is f(t) for unflagged and f(junk) for flagged input tokens."""
    import gguf

    sh = shaped.resolve_shape("qwen3.6-35b-a3b", "small")
    vocab = tiny._load_vocab()
    echo = se.build(sh, vocab.n_vocab, vocab.clean, 0.3, 0)
    emap = tiny.echo_map(vocab.clean, vocab.n_vocab, 0.3, 0)

    def deq(rows: np.ndarray, t: str, width: int = 256) -> np.ndarray:
        padded = np.zeros((rows.shape[0], width), dtype=np.float32)
        padded[:, : rows.shape[1]] = rows
        return gguf.quants.dequantize(encode(padded, t), getattr(gguf.GGMLQuantizationType, t))

    out = deq(se.output_rows(echo, 0, sh.n_vocab), "Q6_K")
    # 500 tokens: the argmax over the whole vocabulary costs 2 * 500 * n_embd * n_vocab flops
    sample = np.random.default_rng(1).choice(vocab.clean, 500, replace=False)
    # every row at once, then the sample's: one row alone generates its whole routing chunk
    embd = deq(se.embd_rows(echo, 0, sh.n_vocab)[sample], "Q4_K")
    x = embd / np.sqrt((embd**2).sum(axis=1, keepdims=True) / sh.n_embd)  # rms norm over n_embd
    assert np.array_equal((x * se.OUTPUT_NORM @ out.T).argmax(axis=1), emap.successor[sample])
    gate, up = (deq(se.detector_rows(echo, w, 0, sh.n_ff_shexp), "Q4_K") for w in ("gate", "up"))
    down = deq(se.detector_rows(echo, "down", 0, sh.n_embd), "Q6_K")
    g, u = x @ gate.T, x @ up.T
    y = x + 0.5 * (g / (1 + np.exp(-g)) * u) @ down.T  # shared expert, sigmoid(0) gate
    y = y / np.sqrt((y**2).sum(axis=1, keepdims=True) / sh.n_embd)
    want = np.where(emap.flagged[sample], emap.successor[emap.junk], emap.successor[sample])
    assert np.array_equal((y @ out.T).argmax(axis=1), want)


@pytest.mark.native
def test_cli_writes_a_sparse_small_model_that_inspect_reads_back(tmp_path: Path, pinned_source: Path) -> None:
    out = tmp_path / "small.gguf"
    result = CliRunner().invoke(
        app, ["make-tiny-model", str(out), "--shape", "qwen3.6-35b-a3b", "--quant", "q4_k_m", "--scale", "small"]
    )
    assert result.exit_code == 0, result.output
    assert "GB on disk" in result.output
    sh = shaped.resolve_shape("qwen3.6-35b-a3b", "small")
    assert_dims(inspect_json(out), out, sh)
    assert read_header(out).data_end == out.stat().st_size
    typo = tmp_path / "no-such-folder" / "small.gguf"  # refused, as for the tiny model: no folder made
    result = CliRunner().invoke(app, ["make-tiny-model", str(typo), "--shape", "qwen3.6-35b-a3b", "--scale", "small"])
    assert result.exit_code == 2 and "does not exist" in result.output and not typo.parent.exists()


@pytest.mark.native
@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"quant": "q5_k"}, "unknown quantisation"),
        ({"scale": "huge"}, "unknown scale"),
        ({"shape": "x"}, "unknown model shape"),
        ({"q": 1.0}, "q must be in"),
    ],
)
def test_bad_arguments_are_user_errors(
    tmp_path: Path, kwargs: dict[str, Any], needle: str, pinned_source: Path
) -> None:
    from orchestrator.errors import UserError

    with pytest.raises(UserError, match=needle):
        shaped.write_shaped_model(tmp_path / "x.gguf", **{"scale": "small", **kwargs})
    assert not list(tmp_path.iterdir())


@pytest.mark.native
def test_scaled_model_echoes_with_acceptance_one_minus_q(
    llama_server: Any, tmp_path: Path, pinned_source: Path
) -> None:
    """On llama-server: greedy output follows the echo map, with and without drafting, and the
    drafts' acceptance is 1 - q (exactly the counts the construction predicts along the path)."""
    model = tmp_path / "small-q0.1.gguf"
    shaped.write_shaped_model(model, quant="q4_k_m", q=0.1, scale="small")
    emap = tiny.load_echo_map(0.1, seed=0)
    server = llama_server(
        model, "--spec-type", "draft-mtp", "--spec-draft-n-max", "1", "--spec-draft-n-min", "1", threads=1
    )
    body = {"prompt": "Hello world", "n_predict": 160, "temperature": 0, "return_tokens": True, "cache_prompt": False}
    res = server.post("/completion", body, timeout=600)
    tokens, t = res["tokens"], res["timings"]
    assert all(emap.successor[a] == b for a, b in itertools.pairwise(tokens))
    drafted, accepted = t["draft_n"], t["draft_n_accepted"]
    assert drafted >= 80
    assert accepted / drafted == pytest.approx(0.9, abs=0.05), (drafted, accepted)
    want_drafted, want_accepted = simulate_n_max_1(tokens[0], len(tokens), emap.successor, emap.flagged)
    assert abs(drafted - want_drafted) <= 2 and abs(accepted - want_accepted) <= 2  # up to the last step
    plain = server.post("/completion", {**body, "n_predict": 40, "speculative": {"n_max": 0}}, timeout=600)
    assert plain["tokens"] == tokens[:40]
