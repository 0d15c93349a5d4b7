"""Read back, don't assume: every models.yaml key that becomes a llama-server flag, set to a value
that is not llama-server's default, launched through the plan and the supervisor, and read back
from llama-server itself (its load log at -lv 4, ``/props``, ``/slots``, ``/apply-template``).

A flag that a newer llama-server renamed or dropped makes the launch exit ("invalid argument") or
the value read back differ; a default that upstream flipped fails ``test_help_states_the_defaults_we_document``
(the schema's descriptions name the defaults a key left out gets, and ``--help`` must agree).
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.config.load import load_config
from orchestrator.config.schema import ModelConfig, SpeculativeConfig
from orchestrator.launch.plan import plan_launch
from orchestrator.launch.settings import KEYS
from orchestrator.native.capabilities import probe_capabilities
from orchestrator.supervise.effective import draft_loaded
from orchestrator.supervise.status import status_row
from orchestrator.supervise.supervisor import Supervisor

pytestmark = [pytest.mark.native, pytest.mark.slow]

#: Each key with a value llama-server does not take by default (the defaults: the pin's --help).
ASKED = {
    "ctx_size": 1536,  # llama-server: the GGUF's trained context
    "parallel": 2,  # 1
    "threads": 1,  # the machine's cores
    "batch_size": 1024,  # 2048
    "ubatch_size": 256,  # 512
    "cache_type_k": "bf16",  # f16 (quantized types cannot load on the tiny model's 16-wide heads)
    "cache_type_v": "f32",  # f16
    "cache_ram": 1024,  # 8192
    "preserve_thinking": True,  # no --chat-template-kwargs
}
ASKED_SPEC = {"n_max": 5, "n_min": 2, "p_min": 0.25, "backend_sampling": False}  # 3, 0, 0, enabled
#: What the schema says a key left out means, checked against --help (a flipped upstream default fails).
DOCUMENTED_DEFAULTS = {
    "--batch-size": ("batch_size", "2048"),
    "--ubatch-size": ("ubatch_size", "512"),
    "--cache-type-k": ("cache_type_k", "f16"),
    "--cache-type-v": ("cache_type_v", "f16"),
    "--cache-ram": ("cache_ram", "8192"),
    "--spec-draft-backend-sampling": ("speculative.backend_sampling", "enabled"),
    "--reasoning-preserve": ("preserve_thinking", "enabled"),
}


@pytest.fixture(scope="module")
def separate(tmp_path_factory: pytest.TempPathFactory, pinned_source: Path) -> tuple[Path, Path]:
    """A trunk and a separate NextN-only draft (``speculative.draft``)."""
    from orchestrator.models.tiny import draft_path, write_tiny_model

    trunk = write_tiny_model(tmp_path_factory.mktemp("rb") / "trunk.gguf", mode="echo", q=0.0, variant="separate")
    return trunk, draft_path(trunk)


@pytest.fixture(scope="module")
def projector(separate: tuple[Path, Path]) -> Path:
    """A tiny vision projector for the trunk (``mmproj``)."""
    from orchestrator.models.tiny_mmproj import write_tiny_mmproj

    return write_tiny_mmproj(separate[0].parent / "mmproj-trunk.gguf")


def _config(tmp_path: Path, trunk: Path, draft: Path, projector: Path) -> Path:
    lines = [f"    {k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in ASKED.items()]
    lines += [f"    mmproj: {projector}"]
    lines += ["    speculative:", "      type: draft-mtp", f"      draft: {draft}"]
    lines += [f"      {k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in ASKED_SPEC.items()]
    cfg = tmp_path / "models.yaml"
    cfg.write_text("models:\n  - name: rb\n" + f"    path: {trunk}\n" + "\n".join(lines) + "\n    kv_persist: false\n")
    return cfg


async def _serve(cfg: Path, bin_info: Any, tmp_path: Path) -> dict[str, Any]:
    config = load_config(cfg)
    [spec] = plan_launch(config, gpus=[], build=bin_info, capabilities=probe_capabilities(bin_info))
    sup = Supervisor([spec], config, log_dir=tmp_path)
    await sup.start()
    try:
        [inst] = sup.instances
        assert await sup.wait_all_ready(120), inst.message
        url = inst.base_url
        async with httpx.AsyncClient(auth=inst.lock.auth, timeout=60, trust_env=False) as client:
            props = (await client.get(f"{url}/props")).json()
            done = await client.post(f"{url}/completion", json={"prompt": "Hello", "n_predict": 24, "temperature": 0})
            slots = (await client.get(f"{url}/slots")).json()
            history = [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b", "reasoning_content": "EARLIER-THOUGHT"},
                {"role": "user", "content": "c"},
            ]
            rendered = (await client.post(f"{url}/apply-template", json={"messages": history})).json()
        return {
            "row": status_row(inst),
            "props": props,
            "slots": slots,
            "timings": done.json()["timings"],
            "prompt": rendered["prompt"],
            "log": inst.log_path.read_text(errors="replace"),
        }
    finally:
        await sup.stop(5.0)


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, bin_info: Any, separate: tuple[Path, Path], projector: Path
) -> dict[str, Any]:
    """One launch with every key set, read back (the tests below share it)."""
    tmp = tmp_path_factory.mktemp("served")
    return asyncio.run(_serve(_config(tmp, *separate, projector), bin_info, tmp))


def test_every_flag_key_reads_back_as_asked(served: dict[str, Any], separate: tuple[Path, Path]) -> None:
    got, draft = served, separate[1]
    settings = {s["key"]: s for s in got["row"]["settings"]}
    assert set(settings) == {key for key, _flag, _get in KEYS}, "a flag key is missing from the read-back"
    effective = {k: s["effective"] for k, s in settings.items()}
    # the load log, as `orchestrator status` shows it (supervise/effective.py)
    assert effective["ctx_size"] == "1536" and effective["parallel"] == "2" and effective["threads"] == "1"
    assert effective["batch_size"] == "1024" and effective["ubatch_size"] == "256"
    assert effective["cache_type_k"] == "bf16" and effective["cache_type_v"] == "f32"
    assert effective["cache_ram"] == "1024"
    assert effective["speculative.n_max"] == "5" and effective["speculative.n_min"] == "2"
    assert effective["speculative.p_min"] == "0.25"
    assert effective["speculative.backend_sampling"] == "disabled"  # the pin's default is enabled
    assert effective["speculative.draft"] == str(draft)  # the draft's own file, not the trunk
    assert effective["preserve_thinking"] == "enabled"
    assert effective["mmproj"] == settings["mmproj"]["asked"]  # the projector it loaded, with MTP on
    assert got["props"]["modalities"]["vision"] is True
    for key, s in settings.items():  # status shows what was asked beside it
        assert s["asked"] is not None, key
    # llama-server's endpoints agree with its log
    assert got["props"]["total_slots"] == 2 and got["props"]["default_generation_settings"]["n_ctx"] == 1536 // 2
    params = next(s["params"] for s in got["slots"] if "params" in s)
    assert params["speculative.n_max"] == 5 and params["speculative.n_min"] == 2
    assert got["timings"]["draft_n"] > 0  # the separate draft drafts
    # template kwargs: {"preserve_thinking": true} renders an earlier turn's reasoning
    assert "EARLIER-THOUGHT" in got["prompt"]


def test_the_draft_comes_from_the_draft_file(served: dict[str, Any], separate: tuple[Path, Path]) -> None:
    """The model loader reads ``speculative.draft``'s file for the draft: its tensors, its size.
    (At the pin, ``common_speculative_init_result`` passes ``params.model.path``; llama-server hands it
    params whose model is the draft's, ``common_base_params_to_speculative``, so the draft's file loads.)"""
    from orchestrator.models.gguf_header import read_header

    def tensors_in(path: Path) -> int:
        return len(read_header(path, keep_string_arrays=()).tensors)

    trunk, draft = separate
    got = served
    loaded = draft_loaded(got["log"])
    assert loaded is not None
    path, tensors = loaded
    assert path == str(draft) and tensors == tensors_in(draft) != tensors_in(trunk)
    sizes = [float(m) for m in re.findall(r"print_info: file size\s+= ([\d.]+) MiB", got["log"])]
    assert len(sizes) == 2 and sizes[1] < sizes[0]  # the draft's own (smaller) file


def test_help_states_the_defaults_we_document(bin_info: Any) -> None:
    """Every flag a key passes is in the binary's --help (renamed or dropped: this fails), with the
    default that models.yaml's schema tells users a key left out gets (flipped upstream: this fails)."""
    caps = probe_capabilities(bin_info)
    for _key, flag, _get in KEYS:
        assert flag in caps.flags, f"{flag} is not in {bin_info.server} --help"
    assert "--no-spec-draft-backend-sampling" in caps.flags  # `false` passes it
    for flag, (key, value) in DOCUMENTED_DEFAULTS.items():
        assert caps.default(flag) == value, (flag, caps.default(flag))
        section, _, name = key.rpartition(".")
        field = (SpeculativeConfig if section else ModelConfig).model_fields[name]
        said = field.description or ""
        wanted = {"speculative.backend_sampling": "on at the pin", "preserve_thinking": "keeps it on by default"}
        assert wanted.get(key, value) in said, f"{key}'s description does not state llama-server's {value}: {said}"


def test_dry_run_shows_each_backend_sampling_flag_and_the_defaults_left(
    tmp_path: Path, bin_info: Any, pinned_source: Path
) -> None:
    from typer.testing import CliRunner

    from orchestrator.cli.app import app

    cfg = tmp_path / "models.yaml"
    for value, flag in (("false", "--no-spec-draft-backend-sampling"), ("true", "--spec-draft-backend-sampling")):
        cfg.write_text(
            "server:\n  port: 0\nmodels:\n  - name: demo\n    path: builtin:tiny-mtp\n    speculative:\n"
            f"      backend_sampling: {value}\n"
        )
        res = CliRunner().invoke(app, ["up", "-c", str(cfg), "--dry-run"])
        assert res.exit_code == 0, res.output
        assert f" {flag} " in res.output.replace("\n", " ")
    cfg.write_text("server:\n  port: 0\nmodels:\n  - name: demo\n    path: builtin:tiny-mtp\n")
    res = CliRunner().invoke(app, ["up", "-c", str(cfg), "--dry-run"])
    out = " ".join(res.output.split())
    assert "backend-sampling" not in out  # left out: llama-server's default, which the plan names
    assert "left to llama-server's defaults (its --help):" in out
    defaults = ("batch_size 2048", "ubatch_size 512", "cache_type_k f16", "cache_ram 8192", "backend_sampling enabled")
    for said in defaults:
        assert said in out, said


@pytest.mark.parametrize("kv_type", ["q8_0", "q4_0"])
def test_a_kv_type_the_plan_refuses_fails_at_load(kv_type: str, bin_info: Any, demo_model: Path) -> None:
    """The plan's rule (launch/kv_cache.py) against the binary: a quantized K cache on the demo model's
    16-wide heads makes llama-server exit at load, as the plan says before launching it."""
    import subprocess

    from orchestrator.launch.kv_cache import loadable
    from orchestrator.models.facts import read_model_facts
    from orchestrator.native.capabilities import library_env

    assert kv_type not in loadable(read_model_facts(demo_model).key_length or 0, fa="auto", v_cache=False)
    argv = [str(bin_info.server), "-m", str(demo_model), "--port", "0", "-c", "512", "-t", "1"]
    env = {**os.environ, **library_env(bin_info)}
    done = subprocess.run([*argv, "--cache-type-k", kv_type], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode != 0 and "does not divide n_embd_head_k=16" in done.stdout + done.stderr
