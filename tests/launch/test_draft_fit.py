"""The fit check of a model with a separate draft GGUF (``speculative.draft``): the draft file's own
weights count once, beside the trunk's; the target is never counted twice."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_launch import caps, config_for

from orchestrator.config.schema import ModelConfig
from orchestrator.launch.fit import estimate_bytes
from orchestrator.launch.plan import plan_launch
from orchestrator.models.facts import read_model_facts
from orchestrator.native import build as build_mod

pytestmark = pytest.mark.usefixtures("pinned_source")


@pytest.mark.native
def test_the_draft_files_weights_count_once(tmp_path: Path) -> None:
    from orchestrator.models.tiny import draft_path, write_tiny_model

    trunk = write_tiny_model(tmp_path / "t.gguf", mode="echo", variant="separate")
    draft = draft_path(trunk)
    bin_dir = tmp_path / "bin"
    native = build_mod.BuildInfo(bin_dir, bin_dir / "llama-server", bin_dir, {"backend": "cpu"})
    model = ModelConfig(name="sep", path=str(trunk), ctx_size=1024, speculative={"draft": str(draft)})
    [spec] = plan_launch(config_for(tmp_path, model), gpus=[], build=native, capabilities=caps(native))
    t, d = read_model_facts(trunk), read_model_facts(draft)
    assert t.weights_bytes != d.weights_bytes  # two different files: the trunk, and the NextN block + its matrices
    alone = estimate_bytes(t, 1024, 1, draft_n_max=3)
    draft_kv = 1024 * d.nextn_layers * d.head_count_kv * (d.key_length + d.value_length) * 2  # type: ignore[operator]
    assert spec.memory == alone + d.weights_bytes + draft_kv  # the draft's file, once, and its head's KV
    assert spec.memory < alone + t.weights_bytes  # not the target a second time
    assert d.weights_bytes <= draft.stat().st_size
