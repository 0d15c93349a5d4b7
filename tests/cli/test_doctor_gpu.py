"""doctor on the GPU path, with a fake ``nvidia-smi`` on PATH and fake toolkits: a driver too old
for the build, a GPU the build has no code for, cuBLAS of another CUDA major, no nvcc for a
GPU, a build whose binary does not start, a driver/library mismatch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gpu_fakes import MISMATCH, RTX_5090, fake_smi, fake_toolkit

from orchestrator.cli import doctor
from orchestrator.host import gpus
from orchestrator.native import cuda as native_cuda
from orchestrator.native import fetch as native_fetch
from orchestrator.native.build import BuildInfo


@pytest.fixture
def smi_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH folder for the fake nvidia-smi, in front; NVML answers nothing (no driver here)."""
    folder = tmp_path / "smi-bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(gpus, "_from_nvml", lambda: (None, "NVML Shared Library Not Found"))
    return folder


def _cuda_build(tmp_path: Path, nvcc: str, arch: str) -> BuildInfo:
    patches = [{"name": p.name, "sha256": p.sha256} for p in native_fetch.list_patches()]
    manifest = {"backend": "cuda", "nvcc": nvcc, "cuda_arch": arch, "patches": patches, "version": "v"}
    return BuildInfo(tmp_path, tmp_path / "llama-server", tmp_path, manifest)


def test_driver_too_old_and_gpu_not_in_the_build_fail(tmp_path: Path, smi_path: Path) -> None:
    fake_smi(smi_path, RTX_5090)
    found, check = doctor.check_gpus()
    assert check.status == doctor.OK and "driver 570.86.10 (CUDA 12.8)" in check.detail
    build = _cuda_build(tmp_path, "Cuda compilation tools, release 13.0, V13.0.88", "89")
    check = doctor.check_gpu_build(build, found)
    assert check.status == doctor.FAIL
    assert "supports CUDA 12.8" in check.detail and "built with CUDA 13.0" in check.detail
    assert "compute capability 12.0" in check.detail and "only sm_89" in check.detail
    assert "--cuda-arch 120" in (check.fix or "") and "update the NVIDIA driver" in (check.fix or "")
    good = _cuda_build(tmp_path, "Cuda compilation tools, release 12.8, V12.8.61", "89;120")
    assert doctor.check_gpu_build(good, found).status == doctor.OK


def test_driver_library_mismatch_keeps_its_reason(smi_path: Path) -> None:
    fake_smi(smi_path, MISMATCH, banner=MISMATCH, exit_code=18)
    found, source = gpus.detect_gpus()
    assert found == [] and "Driver/library version mismatch" in source
    _, check = doctor.check_gpus()
    assert check.status == doctor.WARN and "Driver/library version mismatch" in check.detail


def test_no_nvcc_for_a_gpu_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native_cuda, "find_nvcc", lambda: None)
    check = doctor.check_nvcc(gpu_count=1)
    assert check.status == doctor.WARN and "a GPU is here" in check.detail
    assert "CUDA toolkit" in (check.fix or "")


def test_cublas_major_mismatch_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toolkit = fake_toolkit(tmp_path / "cuda-13.0", "13.0", ("120",), cublas_major=12)
    monkeypatch.setenv("CUDA_HOME", str(toolkit))
    monkeypatch.setattr(native_cuda, "site_dirs", lambda: [tmp_path / "no-site"])
    check = doctor.check_nvcc(gpu_count=1)
    assert check.status == doctor.WARN and "does not match nvcc's CUDA 13" in check.detail
    assert (check.fix or "").startswith("pip install nvidia-cublas ")


def test_a_build_whose_binary_does_not_start_fails(tmp_path: Path) -> None:
    server = tmp_path / "llama-server"
    server.write_text(
        "#!/bin/sh\necho 'llama-server: error while loading shared libraries: libcudart.so.13: "
        "cannot open shared object file: No such file or directory' >&2\nexit 127\n"
    )
    server.chmod(0o755)
    build = _cuda_build(tmp_path, "release 13.0", "120")
    check = doctor.check_build(build, gpu_count=1)
    assert check.status == doctor.FAIL and "cannot find libcudart.so.13" in check.detail
    assert "LD_LIBRARY_PATH" in (check.fix or "") and "--force" not in (check.fix or "")
