"""Launch settings that trade memory for speed (``orchestrator tune`` measures them): the draft's
backend sampling and the prefill batch, from models.yaml through the plan to the argv, refused
where they cannot work."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_launch import after, caps, config_for, write_gguf

from orchestrator.config.load import load_config
from orchestrator.config.schema import ModelConfig, SpeculativeConfig
from orchestrator.config.spec_types import DEFAULT_DRAFT_SAMPLING
from orchestrator.errors import UserError
from orchestrator.launch.plan import plan_launch
from orchestrator.native import build as build_mod


@pytest.fixture
def native(tmp_path: Path) -> build_mod.BuildInfo:
    bin_dir = tmp_path / "bin"
    return build_mod.BuildInfo(bin_dir, bin_dir / "llama-server", bin_dir, {"backend": "cpu"})


def test_backend_sampling_and_batches_reach_the_argv(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    write_gguf(tmp_path / "mtp.gguf", nextn=1)
    model = ModelConfig(
        name="demo", path="mtp.gguf", ubatch_size=1024, batch_size=4096, speculative={"backend_sampling": True}
    )
    [spec] = plan_launch(config_for(tmp_path, model), gpus=[], build=native, capabilities=caps(native))
    argv = spec.argv
    assert after(argv, "-ub") == "1024" and after(argv, "-b") == "4096"
    assert "--spec-draft-backend-sampling" in argv
    assert argv.index("--spec-draft-backend-sampling") > argv.index("--spec-type")  # with the drafter's flags
    off = ModelConfig(name="demo", path="mtp.gguf", speculative={"backend_sampling": False})
    [spec] = plan_launch(config_for(tmp_path, off), gpus=[], build=native, capabilities=caps(native))
    # false passes its own flag: leaving the flag out would leave it on (the pin's common/common.h default)
    assert "--no-spec-draft-backend-sampling" in spec.argv and "--spec-draft-backend-sampling" not in spec.argv
    plain = ModelConfig(name="demo", path="mtp.gguf")
    [spec] = plan_launch(config_for(tmp_path, plain), gpus=[], build=native, capabilities=caps(native))
    flags = {"-ub", "-b", "--spec-draft-backend-sampling", "--no-spec-draft-backend-sampling"}
    assert not flags & set(spec.argv)  # llama-server's defaults


def test_backend_sampling_without_drafting_adds_nothing(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    write_gguf(tmp_path / "plain.gguf")  # no MTP head: speculation off
    model = ModelConfig(name="demo", path="plain.gguf", speculative={"backend_sampling": True})
    [spec] = plan_launch(config_for(tmp_path, model), gpus=[], build=native, capabilities=caps(native))
    assert "--spec-draft-backend-sampling" not in spec.argv


def test_backend_sampling_is_allowed_with_several_slots(tmp_path: Path) -> None:
    # the pin samples the draft on the backend by default (common/common.h), -np 2 included, so a
    # refusal of `true` protected nothing; `false` is the way out of llama.cpp #23903's memory cost
    for value in ("true", "false"):
        cfg = tmp_path / "models.yaml"
        cfg.write_text(
            "models:\n  - name: demo\n    path: builtin:tiny-mtp\n    parallel: 2\n    speculative:\n"
            f"      backend_sampling: {value}\n"
        )
        assert load_config(cfg).models[0].speculative.backend_sampling is (value == "true")


def test_the_guards_name_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "models.yaml"
    bad.write_text("models:\n  - name: demo\n    path: builtin:tiny-mtp\n    batch_size: 512\n    ubatch_size: 1024\n")
    with pytest.raises(UserError) as err:
        load_config(bad)
    assert "ubatch_size" in str(err.value) and "batch_size (512)" in str(err.value)
    with pytest.raises(ValueError):
        SpeculativeConfig(type="none", backend_sampling=True)


def test_a_llama_server_without_the_flag_is_refused_before_launch(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    write_gguf(tmp_path / "mtp.gguf", nextn=1)
    model = ModelConfig(name="demo", path="mtp.gguf", ubatch_size=1024)
    old = dataclasses.replace(caps(native), flags=frozenset({"-m", "--port", "-c", "--spec-type"}))
    with pytest.raises(UserError) as err:
        plan_launch(config_for(tmp_path, model), gpus=[], build=native, capabilities=old)
    assert "ubatch_size" in str(err.value) and "-ub" in str(err.value)


def test_preserve_thinking_false_passes_its_own_flag(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    # the pin keeps earlier reasoning by default (common/arg.cpp: preserve_reasoning = true sets the
    # template's preserve_thinking), so `false` must say so; a binary without the switch gets nothing
    write_gguf(tmp_path / "mtp.gguf", nextn=1)
    model = ModelConfig(name="demo", path="mtp.gguf", preserve_thinking=False)
    pin = dataclasses.replace(caps(native), flags=frozenset({"--reasoning-preserve", "--no-reasoning-preserve"}))
    [spec] = plan_launch(config_for(tmp_path, model), gpus=[], build=native, capabilities=pin)
    assert "--no-reasoning-preserve" in spec.argv and "--chat-template-kwargs" not in spec.argv
    [older] = plan_launch(config_for(tmp_path, model), gpus=[], build=native, capabilities=caps(native))
    assert "--no-reasoning-preserve" not in older.argv
    setting = next(s for s in spec.settings if s.key == "preserve_thinking")
    assert setting.asked == "disabled" and setting.flag == "--reasoning-preserve"


def test_draft_sampling_reaches_the_argv_and_needs_the_flag(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    """``speculative.sampling`` renders ``--spec-draft-sampling`` (b11434) after the drafter's flags;
    unset renders the default; a llama-server whose --help lacks the flag is refused by key."""
    write_gguf(tmp_path / "mtp.gguf", nextn=1)
    for mode in ("greedy", "probabilistic"):
        model = ModelConfig(name="demo", path="mtp.gguf", speculative={"sampling": mode})
        [spec] = plan_launch(config_for(tmp_path, model), gpus=[], build=native, capabilities=caps(native))
        assert after(spec.argv, "--spec-draft-sampling") == mode
        assert spec.argv.index("--spec-draft-sampling") > spec.argv.index("--spec-type")
    plain = ModelConfig(name="demo", path="mtp.gguf")
    [spec] = plan_launch(config_for(tmp_path, plain), gpus=[], build=native, capabilities=caps(native))
    default = DEFAULT_DRAFT_SAMPLING
    assert after(spec.argv, "--spec-draft-sampling") if default else "--spec-draft-sampling" not in spec.argv
    with pytest.raises(ValueError):
        SpeculativeConfig(sampling="nucleus")  # type: ignore[arg-type]
    model = ModelConfig(name="demo", path="mtp.gguf", speculative={"sampling": "probabilistic"})
    old = dataclasses.replace(caps(native), flags=frozenset({"-m", "--port", "-c", "--spec-type"}))
    with pytest.raises(UserError) as err:
        plan_launch(config_for(tmp_path, model), gpus=[], build=native, capabilities=old)
    assert "speculative.sampling" in str(err.value) and "--spec-draft-sampling" in str(err.value)
