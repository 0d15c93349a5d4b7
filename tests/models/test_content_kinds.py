"""The ``kinds`` profile of the shaped echo model (the draft-length policy's test bed): the
answer stays in its prompt's kind, the head is always right on Latin, always wrong on CJK, and
right less and less along a run of Cyrillic tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestrator.models import content_kinds as ck
from orchestrator.models import shaped, tiny


@pytest.mark.parametrize(
    ("text", "kind"),
    [(" the", "latin"), ("Hello", "latin"), ("中文", "cjk"), (" при", "cyrillic"), ("42", "other"), (" (", "other")],
)
def test_token_kind(text: str, kind: str) -> None:
    assert ck.token_kind(text) == kind


def test_kind_map_cycles_within_each_kind() -> None:
    kinds = np.array([0, 1, 0, 2, 1, 0, 3, 2], dtype=np.int8)  # latin cjk latin cyrillic cjk latin other cyrillic
    m = ck.kind_map(kinds, q=0.0, seed=0)
    assert m.successor.tolist() == [2, 4, 5, 7, 1, 0, 6, 3]
    assert m.flagged.tolist() == [False, True, False, False, True, False, False, m.flagged[7]]
    assert not m.flagged[3]  # a Cyrillic run starts right: offset 0 has flag probability 0


def test_cyrillic_acceptance_falls_along_the_run() -> None:
    kinds = np.full(ck.RAMP * 200, 2, dtype=np.int8)
    flagged = ck.kind_map(kinds, q=0.0, seed=3).flagged.reshape(200, ck.RAMP)
    by_offset = flagged.mean(axis=0)
    assert by_offset[: ck.RAMP // 4].mean() < 0.2 < 0.8 < by_offset[-ck.RAMP // 4 :].mean()


def _start(kind: str, offset: int = 0) -> int:
    """A clean token of ``kind`` whose successor starts at ``offset`` in a run (the token before it)."""
    vocab = tiny._load_vocab()
    ids = vocab.clean[ck.clean_kinds(vocab.kv, vocab.clean) == ck.KINDS.index(kind)]
    return int(ids[(5 * ck.RAMP + offset - 1) % len(ids)])


@pytest.mark.native
def test_bed_profile_on_llama_server(llama_server: Any, tmp_path: Path, pinned_source: Path) -> None:
    model = tmp_path / "small-kinds.gguf"
    shaped.write_shaped_model(model, quant="q4_k_m", q=0.1, scale="small", profile="kinds")
    server = llama_server(model, "--spec-type", "draft-mtp", "--spec-draft-n-max", "2", ctx=1024, threads=1)

    def run(kind: str, n: int) -> tuple[float, list[int]]:
        body = {"prompt": [_start(kind)], "n_predict": n, "temperature": 0, "return_tokens": True}
        res = server.post("/completion", {**body, "cache_prompt": False}, timeout=600)
        t = res["timings"]
        return t["draft_n_accepted"] / t["draft_n"], res["tokens"]

    latin, tokens = run("latin", 24)
    vocab = tiny._load_vocab()
    kinds = dict(zip(vocab.clean.tolist(), ck.clean_kinds(vocab.kv, vocab.clean).tolist(), strict=True))
    assert {kinds[t] for t in tokens} == {ck.KINDS.index("latin")}  # the answer stays in its kind
    assert latin == 1.0
    assert run("cjk", 24)[0] == 0.0
    early, late = run("cyrillic", ck.RAMP // 4)[0], run("cyrillic", ck.RAMP)[0]
    assert early > 0.8 and late < early - 0.2


@pytest.mark.native
def test_cli_writes_the_test_bed(tmp_path: Path, pinned_source: Path) -> None:
    from typer.testing import CliRunner

    from orchestrator.cli.app import app
    from orchestrator.models.gguf_header import read_header

    out = tmp_path / "bed.gguf"
    args = ["make-tiny-model", str(out), "--shape", "qwen3.6-35b-a3b", "--scale", "bed", "--quant", "f16"]
    result = CliRunner().invoke(app, [*args, "--profile", "kinds"])
    assert result.exit_code == 0, result.output
    assert "16 trunk layers" in result.output and "drafts right by content kind" in result.output
    meta = read_header(out).metadata
    assert (
        meta["orchestrator.shaped.profile"] == "kinds" and meta["qwen35moe.expert_shared_feed_forward_length"] == 16384
    )
    bad = CliRunner().invoke(app, [*args, "--profile", "nope"])
    assert bad.exit_code != 0 and "unknown profile" in bad.output
