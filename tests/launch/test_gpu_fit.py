"""The fit check on the GPU path, with the real qwen35moe header of Qwen3.6-35B-A3B (a sparse
22.9 GB GGUF, ``qwen36_gguf``) on faked RTX 4090 and RTX 5090: compute buffers of the target and
the MTP draft context and the device margin, ``--n-cpu-moe`` offered and understood,
``gpu_layers: 99`` checked, the split the launch uses, flags that would move the model refused,
the reason a GPU was not found, and the bench's fit (its largest K, its own --force, the right line)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from qwen36_gguf import write_qwen36_gguf

from orchestrator.config.load import load_config
from orchestrator.config.schema import Config, ModelConfig
from orchestrator.errors import UserError
from orchestrator.host.gpus import GPU
from orchestrator.launch.fit import DEVICE_MARGIN, FitRequest, check_fit
from orchestrator.launch.plan import plan_launch
from orchestrator.native import build as build_mod
from orchestrator.native.capabilities import ServerCapabilities

MIB, GIB = 2**20, 2**30
CUDA = ServerCapabilities(backend="cuda", draft_mtp=True, flags=frozenset())


def rtx_4090(index: int = 0, free_gib: float = 23.3) -> GPU:
    return GPU(index, "NVIDIA GeForce RTX 4090", f"GPU-4090{index}", 24564 * MIB, int(free_gib * GIB), "8.9")


def rtx_5090(index: int = 0, free_gib: float = 31.1) -> GPU:
    return GPU(index, "NVIDIA GeForce RTX 5090", f"GPU-5090{index}", 32607 * MIB, int(free_gib * GIB), "12.0")


@pytest.fixture(scope="module")
def qwen36(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_qwen36_gguf(tmp_path_factory.mktemp("qwen36") / "Qwen3.6-35B-A3B-UD-Q4_K_XL.gguf")


@pytest.fixture
def cuda_build(tmp_path: Path) -> build_mod.BuildInfo:
    bin_dir = tmp_path / "bin"
    return build_mod.BuildInfo(bin_dir, bin_dir / "llama-server", bin_dir, {"backend": "cuda"})


def _config(tmp_path: Path, gguf: Path, **fields: object) -> Config:
    text = "models:\n  - name: qwen3.6-35b-a3b\n    path: " + str(gguf) + "\n"
    for key, value in fields.items():
        text += f"    {key}: {value}\n"
    path = tmp_path / "models.yaml"
    path.write_text(text)
    return load_config(path)


def test_a_4090_at_32k_is_refused_and_offered_expert_offload(
    tmp_path: Path, qwen36: Path, cuda_build: build_mod.BuildInfo
) -> None:
    """Before: 0.5 GiB for compute passed it (22.7 of 23.3 GiB) and llama-server ran out of
    memory; now the logits of a ubatch, the MTP draft context and the device margin count."""
    config = _config(tmp_path, qwen36, ctx_size=32768, gpus="[0]")
    with pytest.raises(UserError) as err:
        plan_launch(config, gpus=[rtx_4090()], build=cuda_build, capabilities=CUDA, check_ports=False)
    assert "GPU 0 (NVIDIA GeForce RTX 4090): needs 24.2 GiB" in str(err.value)
    hint = err.value.hint or ""
    assert f"{tmp_path / 'models.yaml'}:2: models[0]: add extra_args: ['--n-cpu-moe', '" in hint
    n = int(hint.split("'--n-cpu-moe', '")[1].split("'")[0])
    # what the hint says fits without --force
    fixed = _config(tmp_path, qwen36, ctx_size=32768, gpus="[0]", extra_args=f"['--n-cpu-moe', '{n}']")
    [spec] = plan_launch(fixed, gpus=[rtx_4090()], build=cuda_build, capabilities=CUDA, check_ports=False)
    assert spec.argv[-2:] == ("--n-cpu-moe", str(n))
    assert [note.split(" (")[0] for note in spec.notes] == ["GPU 0: needs about 23.2 GiB"]
    if n > 1:  # and it is the least that does
        less = _config(tmp_path, qwen36, ctx_size=32768, gpus="[0]", extra_args=f"['--n-cpu-moe', '{n - 1}']")
        with pytest.raises(UserError):
            plan_launch(less, gpus=[rtx_4090()], build=cuda_build, capabilities=CUDA, check_ports=False)


def test_a_5090_fits_32k_and_64k(tmp_path: Path, qwen36: Path, cuda_build: build_mod.BuildInfo) -> None:
    for ctx in (32768, 65536):
        config = _config(tmp_path, qwen36, ctx_size=ctx)
        [spec] = plan_launch(config, gpus=[rtx_5090()], build=cuda_build, capabilities=CUDA, check_ports=False)
        assert spec.gpus == (0,) and spec.spec_type == "draft-mtp"
        assert spec.argv[spec.argv.index("-lv") + 1] == "4"  # readiness reads the model buffers
        assert spec.notes[0].startswith("GPU 0: needs about 2") and "31.1 GiB is free" in spec.notes[0]


def test_gpu_layers_99_is_all_layers_and_checked(tmp_path: Path, qwen36: Path, cuda_build: build_mod.BuildInfo) -> None:
    """41 blocks + output = 42 offloadable layers: 99 is all of them, so the fit is checked
    (before: any number turned the check off); 20 is a real partial offload."""
    config = _config(tmp_path, qwen36, ctx_size=32768, gpus="[0]", gpu_layers=99)
    with pytest.raises(UserError, match="does not fit"):
        plan_launch(config, gpus=[rtx_4090()], build=cuda_build, capabilities=CUDA, check_ports=False)
    partial = _config(tmp_path, qwen36, ctx_size=32768, gpus="[0]", gpu_layers=20)
    [spec] = plan_launch(partial, gpus=[rtx_4090()], build=cuda_build, capabilities=CUDA, check_ports=False)
    assert any("partial offload" in n for n in spec.notes)


def test_the_fit_splits_as_the_launch_splits() -> None:
    """--tensor-split 32,24 puts 4/7 of the model on GPU 0; an even split would call a model
    that overflows GPU 0 a fit."""
    gpus = [rtx_5090(0, free_gib=14.0), rtx_4090(1, free_gib=23.0)]
    need = 22 * GIB
    even = FitRequest("m-0", "models[0]", (0, 1), need, overhead=0)
    assert all("needs about 11.0 GiB" in n for n in check_fit([even], gpus)["m-0"])  # fits when even
    by_memory = dataclasses.replace(even, shares=(32 / 56, 24 / 56))
    with pytest.raises(UserError, match=r"GPU 0 .*needs 12\.6 GiB"):
        check_fit([by_memory], [rtx_5090(0, free_gib=12.0), rtx_4090(1)])


def test_plan_passes_the_tensor_split_proportions(
    tmp_path: Path, qwen36: Path, cuda_build: build_mod.BuildInfo
) -> None:
    config = _config(tmp_path, qwen36, ctx_size=32768, gpus="[0, 1]")
    # 24.2 GiB in 32:24 -> GPU 0 holds 57 %: with 11 GiB free there it does not fit, though an
    # even split (half each) would have
    with pytest.raises(UserError, match="GPU 0 "):
        plan_launch(
            config,
            gpus=[rtx_5090(0, free_gib=13.5), rtx_4090(1, free_gib=23.0)],
            build=cuda_build,
            capabilities=CUDA,
            check_ports=False,
        )


@pytest.mark.parametrize("flag", ["-sm", "--split-mode", "-mg", "--main-gpu", "-dev", "--device"])
def test_flags_that_move_the_model_are_refused_in_extra_args(flag: str) -> None:
    with pytest.raises(ValueError, match="gpus"):
        ModelConfig(name="m", path="m.gguf", extra_args=[flag, "0"])


def test_no_gpu_found_says_why_on_every_cpu_instance(
    tmp_path: Path, qwen36: Path, cuda_build: build_mod.BuildInfo
) -> None:
    """gpus: auto on a CUDA build whose GPU detection failed: the plan says it runs on the CPU and why."""
    source = (
        "none (CPU): NVML: Driver/library version mismatch; nvidia-smi: Failed to initialize NVML: "
        "Driver/library version mismatch / NVML library version: 580.65"
    )
    config = _config(tmp_path, qwen36, ctx_size=32768)
    [spec] = plan_launch(config, gpus=[], build=cuda_build, capabilities=CUDA, check_ports=False, gpu_source=source)
    assert spec.gpus == ()
    assert any("runs on the CPU because no GPU is usable" in n and "version mismatch" in n for n in spec.notes)


def test_bench_fit_counts_its_largest_k_and_names_the_models_line(
    tmp_path: Path, qwen36: Path, cuda_build: build_mod.BuildInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bench plans the model it sweeps at the largest K, names that model's own line (it
    named models[0] of a narrowed copy), and has the --force its message offers."""
    from orchestrator.bench import sweep

    path = tmp_path / "models.yaml"
    path.write_text(
        "models:\n"
        "  - name: demo\n    path: builtin:tiny-mtp\n"
        f"  - name: qwen3.6-35b-a3b\n    path: {qwen36}\n    ctx_size: 24576\n    gpus: [0]\n"
    )
    monkeypatch.setattr(sweep.build, "locate", lambda: cuda_build)
    monkeypatch.setattr(sweep, "probe_capabilities", lambda info: CUDA)
    # a 5090 that another process shares: room for K = 3 (24.1 GiB), not for K = 8 (24.4 GiB)
    monkeypatch.setattr(sweep.gpus_mod, "detect_gpus", lambda: ([rtx_5090(free_gib=24.25)], "nvidia-smi"))
    target = sweep.plan_target(path, "qwen3.6-35b-a3b", n_max=3)  # fits at the model's own K
    assert target.base.gpus == (0,)
    with pytest.raises(UserError) as err:
        sweep.plan_target(path, "qwen3.6-35b-a3b", n_max=8)
    assert f"{path}:4: models[1]" in str(err.value) + (err.value.hint or "")
    assert "--force" in (err.value.hint or "")
    forced = sweep.plan_target(path, "qwen3.6-35b-a3b", n_max=8, force=True)
    assert any(n.startswith("forced: GPU 0") for n in forced.base.notes)
    assert DEVICE_MARGIN == 1024 * MIB
