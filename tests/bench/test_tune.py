"""``orchestrator tune``: the table and the recommendation as functions on samples, the write into
models.yaml, and the whole command on the echo model (the shaped model and a GPU give its figures
meaning; here the pipeline is what is tested)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrator.bench.tune import MARGIN, Sample, Setting, recommend, table
from orchestrator.cli.app import app
from orchestrator.config.load import load_config
from orchestrator.config.yaml_edit import set_launch_settings

DEFAULT, UB2K = Setting(None), Setting(2048)
BS_ON, BS_OFF = Setting(None, backend_sampling=True), Setting(None, backend_sampling=False)


def samples(setting: Setting, what: str, *values: float) -> list[Sample]:
    return [Sample(setting, i, what, v) for i, v in enumerate(values)]


def test_the_table_has_medians_spreads_and_ratios_to_the_default() -> None:
    rows = table(samples(DEFAULT, "prefill@8K", 100, 110, 90) + samples(UB2K, "prefill@8K", 150, 160, 140))
    by = {r.setting: r for r in rows}
    assert by[DEFAULT].median == 100 and by[DEFAULT].ratio == 1.0 and by[DEFAULT].n == 3
    assert by[UB2K].median == 150 and by[UB2K].ratio == pytest.approx(1.5)
    assert by[UB2K].q1 <= 150 <= by[UB2K].q3


def test_a_clear_win_is_recommended_and_noise_is_not() -> None:
    clear = samples(DEFAULT, "prefill@8K", 100, 101, 99) + samples(UB2K, "prefill@8K", 150, 151, 149)
    clear += samples(BS_OFF, "decode", 50, 51, 49) + samples(BS_ON, "decode", 56, 57, 55)
    measured = {"backend_sampling_measured": True}
    assert recommend(table(clear)) == {"ubatch_size": 2048, "backend_sampling": True, **measured}
    # on against off, both ways: off winning is written as false (each value passes its own flag)
    off_wins = samples(BS_OFF, "decode", 60, 61, 59) + samples(BS_ON, "decode", 50, 51, 49)
    assert recommend(table(off_wins))["backend_sampling"] is False
    # a median 4% up whose spread overlaps the other's is noise: nothing is written
    noisy = samples(DEFAULT, "prefill@8K", 80, 100, 120) + samples(UB2K, "prefill@8K", 90, 104, 125)
    noisy += samples(BS_OFF, "decode", 48, 50, 53) + samples(BS_ON, "decode", 49, 52, 54)
    assert recommend(table(noisy)) == {"ubatch_size": None, "backend_sampling": None, **measured}
    assert 1 + MARGIN < 1.04  # the noisy case was above the margin: the spread decided
    # backend sampling not measured (no drafting, no flags): not a recommendation either way
    alone = recommend(table(samples(DEFAULT, "decode", 50, 51)))
    assert alone["backend_sampling"] is None and not alone["backend_sampling_measured"]


def test_the_deepest_prefill_decides_the_ubatch() -> None:
    rows = table(
        samples(DEFAULT, "prefill@8K", 100, 100, 100)
        + samples(UB2K, "prefill@8K", 200, 200, 200)
        + samples(DEFAULT, "prefill@32K", 100, 100, 100)
        + samples(UB2K, "prefill@32K", 99, 99, 99)
    )
    assert recommend(rows)["ubatch_size"] is None


def test_apply_writes_and_removes_keeping_comments(tmp_path: Path) -> None:
    cfg = tmp_path / "models.yaml"
    cfg.write_text("models:\n  - name: demo  # mine\n    path: builtin:tiny-mtp\n")
    diff = set_launch_settings(cfg, "demo", ubatch_size=2048, backend_sampling=True)
    assert (
        "+    ubatch_size: 2048" in diff and "backend_sampling: true" in cfg.read_text() and "# mine" in cfg.read_text()
    )
    model = load_config(cfg).models[0]
    assert model.ubatch_size == 2048 and model.speculative.backend_sampling
    set_launch_settings(cfg, "demo", ubatch_size=None, backend_sampling=False)
    model = load_config(cfg).models[0]
    # false is written, not removed: absent means llama-server's default, which is on at the pin
    assert model.ubatch_size is None and model.speculative.backend_sampling is False
    assert "# mine" in cfg.read_text()
    assert set_launch_settings(cfg, "demo", ubatch_size=None, backend_sampling=None) == ""


@pytest.mark.native
def test_tune_on_the_echo_model_prints_the_table_and_applies_it(
    tmp_path: Path, bin_info: Any, echo_model: Path
) -> None:
    cfg = tmp_path / "models.yaml"
    cfg.write_text(f"# kept\nmodels:\n  - name: echo\n    path: {echo_model}\n    ctx_size: 512\n    threads: 1\n")
    args = ["tune", "-c", str(cfg), "--ubatch", "64,512", "--depths", "1k", "--rounds", "2", "--n-predict", "16"]
    res = CliRunner().invoke(app, [*args, "--apply"])
    assert res.exit_code == 0, res.output
    for setting in ("ub512", "ub64", "ub512 bs-on", "ub512 bs-off"):  # the default, one other -ub, both flags
        assert setting in res.output
    assert "prefill@1K" in res.output and "decode" in res.output and "recommended:" in res.output
    model = load_config(cfg).models[0]
    said = res.output.split("recommended:", 1)[1]
    assert (f"ubatch_size: {model.ubatch_size}" in said) or (model.ubatch_size is None and "default (512)" in said)
    bs = model.speculative.backend_sampling
    assert f"backend_sampling: {str(bs).lower()}" in said if bs is not None else "backend_sampling: as it is" in said
    assert cfg.read_text().startswith("# kept")


@pytest.mark.native
@pytest.mark.parametrize("command", ["tune", "bench"])
def test_depths_beyond_the_trained_context_blame_depths_not_models_yaml(
    tmp_path: Path, echo_model: Path, command: str
) -> None:
    """The run raises ctx_size for its deepest prompt; the message used to name the user's
    models.yaml ctx_size line (4096 trained tokens, ctx_size 512 in the file)."""
    cfg = tmp_path / "models.yaml"
    cfg.write_text(f"models:\n  - name: echo\n    path: {echo_model}\n    ctx_size: 512\n    threads: 1\n")
    res = CliRunner().invoke(app, [command, "-c", str(cfg), "--depths", "8k"])
    assert res.exit_code == 2, res.output  # a UserError
    said = " ".join(res.output.split())
    assert "--depths 8k" in said and "trained for (4096 tokens)" in said, said
    assert "models.yaml:" not in said and "set ctx_size" not in said, said  # not the user's line
    assert "e.g. --depths 3k" in said and "allow_ctx_beyond_trained" in said, said


def test_ubatch_0_is_refused_with_an_example_that_works(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["tune", "-c", str(tmp_path / "models.yaml"), "--ubatch", "0"])
    said = " ".join(res.output.split())
    assert res.exit_code == 2 and "--ubatch: 0 is below 1" in said and "prefill step" in said, said
    example = said.split("e.g. --ubatch", 1)[1].split()[0]
    assert example == "512,1024,2048" and "0" not in example.split(","), said
