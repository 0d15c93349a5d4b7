"""A llama-server the user already has (``build.llama_server`` / ``up --llama-server``): probed as
ours is, served through, and the features of our patch queue it lacks reported off, with their
cost, by ``up``, ``status`` and ``doctor``. The binary is the pinned llama.cpp built WITHOUT
``native/patches`` (``orchestrator build --no-patches``, which ``scripts/test.sh`` runs before
pytest), so it is what a stock llama.cpp of the pinned commit is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from supervision_helpers import RunningUp

from orchestrator.cli import doctor
from orchestrator.native import build as native_build
from orchestrator.native.capabilities import probe_capabilities
from orchestrator.native.fetch import list_patches
from orchestrator.native.plan import plan_build


@pytest.fixture(scope="module")
def stock_server(bin_info: Any) -> native_build.BuildInfo:
    """The unpatched llama-server of this toolchain (built by ``orchestrator build --no-patches``)."""
    plan = plan_build(bin_info.manifest.get("backend", "cpu"), bin_info.manifest.get("cuda_arch"), patched=False)
    root = native_build.builds_root() / plan.key
    if not native_build.is_built(root, plan.key, (native_build.SERVER,)):
        why = "no unpatched llama-server: run `orchestrator build --backend cpu --no-patches` (scripts/test.sh does)"
        if os.environ.get("ORCHESTRATOR_REQUIRE_NATIVE") == "1":
            pytest.fail(why)
        pytest.skip(why)
    assert not plan.patches and (root / "bin" / "manifest.json").is_file()
    return native_build.adopt(root / "bin" / native_build.SERVER)


@pytest.mark.native
def test_capabilities_of_a_stock_server_name_every_patch_feature_off(stock_server: Any, bin_info: Any) -> None:
    capabilities = probe_capabilities(stock_server)
    assert capabilities.draft_mtp and capabilities.patches == frozenset()
    off = capabilities.features_off
    assert len(off) == len(list_patches())  # every patch of the queue, each with what it costs
    assert any(line.startswith("keep-alive after streamed answers off (needs 0001-") for line in off)
    assert any(line.startswith("per-request draft length") and "drafting on" in line for line in off)
    assert probe_capabilities(bin_info).features_off == ()  # our own build has them all


@pytest.mark.native
def test_up_serves_the_demo_through_an_adopted_server_and_status_says_what_is_off(
    stock_server: Any, demo_model: Path, tmp_path: Path
) -> None:
    config = tmp_path / "models.yaml"
    config.write_text(
        f"build: {{llama_server: {stock_server.server}}}\n"
        "server: {host: 127.0.0.1, port: 0, timeouts: {load: 120}}\n"
        f"models:\n  - {{name: demo, path: {demo_model}, ctx_size: 512, threads: 1, thinking: false}}\n"
    )
    with RunningUp(config, tmp_path / "state") as up:
        assert up.instance_pids()
        reply = httpx.post(
            f"{up.run['endpoint']}/v1/chat/completions",
            json={"model": "demo", "max_tokens": 16, "messages": [{"role": "user", "content": "Hello"}]},
            timeout=120,
            trust_env=False,
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["timings"]["draft_n"] > 0  # MTP drafting works without our patches
        shown = up.cli("status")
        rows = json.loads(up.cli("status", "--json").stdout)["instances"]
    assert shown.returncode == 0, shown.stderr
    assert "llama-server without our patches" in shown.stdout
    assert "per-request draft length (speculative.n_max / n_min) off" in shown.stdout
    assert "keep-alive after streamed answers off" in shown.stdout
    assert rows[0]["features_off"] == list(probe_capabilities(stock_server).features_off)
    said = up.out.read_text()
    assert f"llama-server: {stock_server.server} (yours" in said and "of our patches off" in said
    for child in rows:
        assert str(child["gguf"]) == str(demo_model)


def test_a_path_that_is_not_a_llama_server_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "models.yaml"
    config.write_text("build: {llama_server: bin/llama-server}\nmodels:\n  - {name: demo, path: builtin:tiny-mtp}\n")
    env = {**os.environ, "ORCHESTRATOR_STATE": str(tmp_path / "state")}
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.app", "up", "-c", str(config), "--dry-run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        done.returncode == 2 and f"{tmp_path / 'bin' / 'llama-server'}: not an executable llama-server" in done.stderr
    )
    assert "Traceback" not in done.stderr
    # an executable that is another program: named as such, not "does not support --spec-type draft-mtp"
    other = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli.app",
            "up",
            "-c",
            str(config),
            "--dry-run",
            "--llama-server",
            "/bin/ls",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert other.returncode == 2 and "/bin/ls is not a llama-server" in other.stderr, other.stderr
    assert "Traceback" not in other.stderr


@pytest.mark.native
def test_doctor_names_an_adopted_server_and_what_it_lacks(stock_server: Any, tmp_path: Path) -> None:
    config = tmp_path / "models.yaml"
    config.write_text(
        f"build: {{llama_server: {stock_server.server}}}\nmodels:\n  - {{name: d, path: builtin:tiny-mtp}}\n"
    )
    check = next(c for c in doctor.collect(config) if c.name == "native build")
    assert check.status == doctor.WARN and "yours (build.llama_server)" in check.detail
    assert "per-request draft length" in check.detail and check.fix is not None


@pytest.mark.native
def test_adaptive_draft_length_is_refused_on_a_server_without_per_request_k(
    stock_server: Any, bin_info: Any, demo_model: Path, tmp_path: Path
) -> None:
    """It would choose K for every request and the server would ignore each choice: refused, named."""
    from orchestrator.config.load import load_config
    from orchestrator.errors import UserError
    from orchestrator.launch.plan import plan_launch

    config = tmp_path / "models.yaml"
    config.write_text(
        "models:\n  - name: demo\n"
        f"    path: {demo_model}\n    ctx_size: 512\n    speculative: {{type: draft-mtp, n_max: 3, adaptive: true}}\n"
    )
    cfg = load_config(config)
    with pytest.raises(UserError) as err:
        plan_launch(cfg, gpus=[], build=stock_server, capabilities=probe_capabilities(stock_server), check_ports=False)
    assert "models.yaml:5: models[0].speculative.adaptive" in str(err.value)
    assert "per-request draft length" in str(err.value) and err.value.hint and "build.llama_server" in err.value.hint
    specs = plan_launch(cfg, gpus=[], build=bin_info, capabilities=probe_capabilities(bin_info), check_ports=False)
    assert specs and specs[0].features_off == ()  # our own build: adaptive plans
