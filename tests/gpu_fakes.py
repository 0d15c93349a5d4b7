"""Fakes for the GPU and its driver, for tests on machines without either: a CUDA toolkit
folder whose nvcc is a script, and an ``nvidia-smi`` script that answers like a real one."""

from __future__ import annotations

from pathlib import Path


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def fake_toolkit(root: Path, release: str, archs: tuple[str, ...], cublas_major: int | None = None) -> Path:
    """A CUDA toolkit folder whose ``bin/nvcc`` is a script saying ``release`` and listing
    ``archs``, with ``include/cuda_runtime.h``, ``lib64/libcudart.so.N`` and, when asked,
    cuBLAS of ``cublas_major``."""
    major = release.split(".")[0]
    nvcc = root / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True, exist_ok=True)
    listing = "\\n".join(f"compute_{a}" for a in archs)
    nvcc.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "--list-gpu-arch" ]; then printf "{listing}\\n"; exit 0; fi\n'
        f'echo "Cuda compilation tools, release {release}, V{release}.0"\n'
    )
    nvcc.chmod(0o755)
    _touch(root / "include" / "cuda_runtime.h")
    _touch(root / "lib64" / f"libcudart.so.{major}")
    if cublas_major is not None:
        _touch(root / "include" / "cublas_v2.h")
        _touch(root / "lib64" / f"libcublas.so.{cublas_major}")
        _touch(root / "lib64" / f"libcublasLt.so.{cublas_major}")
    return root


BANNER = """Mon Nov 30 15:00:00 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 570.86.10              Driver Version: 570.86.10      CUDA Version: 12.8     |
+-----------------------------------------------------------------------------------------+
"""
RTX_5090 = "0, NVIDIA GeForce RTX 5090, GPU-5090aaaa, 32607, 31850, 12.0"
MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.65"


def fake_smi(folder: Path, query_answer: str, banner: str = BANNER, exit_code: int = 0) -> Path:
    """Put a fake ``nvidia-smi`` in ``folder``: ``--query-gpu`` prints ``query_answer``, a plain
    call prints ``banner``; both exit with ``exit_code``."""
    folder.mkdir(parents=True, exist_ok=True)
    smi = folder / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'case "$1" in --query-gpu=*) cat <<"EOF"\n'
        + query_answer
        + '\nEOF\n;; *) cat <<"EOF"\n'
        + banner
        + f"\nEOF\n;; esac\nexit {exit_code}\n"
    )
    smi.chmod(0o755)
    return smi
