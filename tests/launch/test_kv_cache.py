"""KV cache types as models.yaml keys (``cache_type_k``, ``cache_type_v``): the plan passes them, and
refuses a type the model cannot load with (the pin's ``llama_init_from_model`` rules), naming the
key and the types that load. ``tests/launch/test_read_back.py`` checks the same rules against the
real llama-server."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_launch import after, caps, config_for

from orchestrator.config.load import load_config
from orchestrator.config.schema import ModelConfig
from orchestrator.errors import UserError
from orchestrator.launch.kv_cache import flash_attn, loadable
from orchestrator.launch.plan import plan_launch
from orchestrator.native import build as build_mod

pytestmark = pytest.mark.usefixtures("pinned_source")  # the demo model's tokenizer comes from it


@pytest.fixture
def native(tmp_path: Path) -> build_mod.BuildInfo:
    bin_dir = tmp_path / "bin"
    return build_mod.BuildInfo(bin_dir, bin_dir / "llama-server", bin_dir, {"backend": "cpu"})


@pytest.mark.native
def test_q4_0_on_the_demo_model_is_refused_naming_the_key_and_the_types_that_load(
    tmp_path: Path, native: build_mod.BuildInfo
) -> None:
    cfg = tmp_path / "models.yaml"
    cfg.write_text("models:\n  - name: demo\n    path: builtin:tiny-mtp\n    cache_type_k: q4_0\n")
    with pytest.raises(UserError) as err:
        plan_launch(load_config(cfg), gpus=[], build=native, capabilities=caps(native))
    said = f"{err.value} {err.value.hint}"
    # the demo model's heads are 16 wide; every quantized type has blocks of 32 (ggml)
    assert "models.yaml:4" in said and "cache_type_k q4_0" in said and "head size (16)" in said
    assert "f32, f16, bf16" in said and "q8_0" not in err.value.hint  # type: ignore[operator]


@pytest.mark.native
def test_float_types_reach_the_argv(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    model = ModelConfig(name="demo", path="builtin:tiny-mtp", cache_type_k="bf16", cache_type_v="f32", cache_ram=0)
    [spec] = plan_launch(config_for(tmp_path, model), gpus=[], build=native, capabilities=caps(native))
    assert after(spec.argv, "--cache-type-k") == "bf16" and after(spec.argv, "--cache-type-v") == "f32"
    assert after(spec.argv, "--cache-ram") == "0"
    [plain] = plan_launch(
        config_for(tmp_path, ModelConfig(name="demo", path="builtin:tiny-mtp")),
        gpus=[],
        build=native,
        capabilities=caps(native),
    )
    assert not {"--cache-type-k", "--cache-type-v", "--cache-ram"} & set(plain.argv)  # llama-server's defaults


@pytest.mark.native
def test_extra_args_may_not_set_them(tmp_path: Path) -> None:
    cfg = tmp_path / "models.yaml"
    cfg.write_text("models:\n  - name: demo\n    path: builtin:tiny-mtp\n    extra_args: [--cache-type-k, q8_0]\n")
    with pytest.raises(UserError, match=r"use the models\.yaml key cache_type_k"):
        load_config(cfg)


@pytest.mark.native
def test_which_types_load_by_head_size_and_flash_attention() -> None:
    floats = ["f32", "f16", "bf16"]
    assert loadable(16, fa="auto", v_cache=False) == floats
    assert loadable(256, fa="auto", v_cache=True) == [*floats, "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]
    assert loadable(256, fa="off", v_cache=True) == floats  # a quantized V cache needs flash attention
    assert "q8_0" in loadable(128, fa="off", v_cache=False)
    assert flash_attn(["-fa", "off"]) == "off" and flash_attn(["--flash-attn=on"]) == "on" and flash_attn([]) == "auto"


@pytest.mark.native
def test_a_quantized_v_cache_with_flash_attention_off_is_refused(tmp_path: Path) -> None:
    from orchestrator.launch.kv_cache import check_kv_types
    from orchestrator.models.facts import read_model_facts
    from orchestrator.models.tiny import demo_model

    facts = read_model_facts(demo_model())
    wide = dataclasses.replace(facts, key_length=128, value_length=128)
    model = ModelConfig(name="demo", path="builtin:tiny-mtp", cache_type_v="q8_0", extra_args=["-fa", "off"])
    with pytest.raises(UserError, match="cache_type_v q8_0 cannot load: a quantized V cache needs flash attention"):
        check_kv_types(config_for(tmp_path, model), 0, model, wide)
    auto = model.model_copy(update={"extra_args": []})  # -fa auto (the default) turns it on for a quantized V
    check_kv_types(config_for(tmp_path, auto), 0, auto, wide)
