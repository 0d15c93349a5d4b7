"""Which CUDA pieces go together: GPU architecture and toolkit, cuBLAS and nvcc, driver and build.

Pure functions on version strings and file names (tested on literals):

- ``parse_release``: ``"release 13.0, V13.0.88"`` / ``"12.8"`` / NVML's ``12080`` -> ``(13, 0)``.
- ``check_arch_toolkit``: an architecture newer than the toolkit (sm_120 needs CUDA 12.8) is a
  ``UserError`` that says so, before CMake fails with nvcc's "Unsupported gpu architecture".
- ``library_major``: ``libcublas.so.12`` (or a link to it) -> 12; a CUDA 12 cuBLAS does not
  link or load with nvcc 13's runtime, so ``find_cublas`` keeps only the matching major.
- ``cublas_install_hint``: the wheel for that major (``nvidia-cublas`` ships CUDA 13 as
  ``nvidia/cu13``; CUDA 12 is ``nvidia-cublas-cu12``).
- ``driver_problem``, ``arch_problem``: whether the driver and the GPU can run a build.

The minimum toolkit per architecture comes from NVIDIA's CUDA release notes (sm_89/sm_90: 11.8;
sm_100/sm_101/sm_120: 12.8; sm_103/sm_121: 12.9; sm_110: 13.0).
"""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.errors import UserError

MIN_CUDA: dict[str, tuple[int, int]] = {
    "89": (11, 8),
    "90": (11, 8),
    "100": (12, 8),
    "101": (12, 8),
    "103": (12, 9),
    "110": (13, 0),
    "120": (12, 8),
    "121": (12, 9),
}


def parse_release(text: str | int | None) -> tuple[int, int] | None:
    """A CUDA version as ``(major, minor)``, or None when ``text`` holds none.

    Accepts nvcc's ``"Cuda compilation tools, release 13.0, V13.0.88"``, nvidia-smi's
    ``"CUDA Version: 12.8"``, a bare ``"12.8"`` and NVML's integer ``12080``.
    """
    if text is None:
        return None
    if isinstance(text, int):
        return (text // 1000, (text % 1000) // 10)
    m = re.search(r"release (\d+)\.(\d+)", text) or re.search(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _arch_number(arch: str) -> str:
    """``"120a"``, ``"120-real"`` -> ``"120"``."""
    m = re.match(r"\d+", arch)
    return m.group(0) if m else arch


def check_arch_toolkit(archs: str, release: tuple[int, int] | None) -> None:
    """Refuse architectures this toolkit cannot compile for.

    Args:
        archs: ``CMAKE_CUDA_ARCHITECTURES`` form, e.g. ``"89;120"``.
        release: nvcc's ``(major, minor)``; None (unknown) checks nothing.
    Raises:
        UserError: e.g. "sm_120 needs CUDA 12.8 or newer; this nvcc is CUDA 12.4".
    """
    if release is None:
        return
    for arch in archs.split(";"):
        need = MIN_CUDA.get(_arch_number(arch))
        if need is not None and release < need:
            raise UserError(
                f"sm_{_arch_number(arch)} needs CUDA {need[0]}.{need[1]} or newer; "
                f"this nvcc is CUDA {release[0]}.{release[1]}",
                hint=f"install CUDA {need[0]}.{need[1]}+ (and set CUDA_HOME to it), "
                "or build for another GPU with --cuda-arch",
            )


def library_major(lib: Path) -> int | None:
    """The soname major of a shared library: ``libcublas.so.12.8.4.1`` -> 12; an unversioned
    ``libcublas.so`` is followed through its links; None when no version shows."""
    for name in (lib.name, lib.resolve().name if lib.exists() else lib.name):
        m = re.search(r"\.so\.(\d+)", name)
        if m:
            return int(m.group(1))
    return None


def cublas_install_hint(major: int | None) -> str:
    """What to install for cuBLAS of CUDA ``major``."""
    if major is not None and major <= 12:
        return f"pip install nvidia-cublas-cu{major}  (or install the CUDA {major} toolkit's cuBLAS)"
    return "pip install nvidia-cublas  (CUDA 13; or install the CUDA toolkit's cuBLAS)"


def driver_problem(driver_cuda: tuple[int, int] | None, build_cuda: tuple[int, int] | None) -> str | None:
    """Why a driver supporting CUDA ``driver_cuda`` cannot run a build made with CUDA
    ``build_cuda``, or None (unknown versions are not judged).

    CUDA's minor-version compatibility lets a 12.x driver run any 12.y build; another major
    needs a newer driver (CUDA 13 needs driver 580 or newer).
    """
    if driver_cuda is None or build_cuda is None:
        return None
    if driver_cuda[0] < build_cuda[0]:
        return (
            f"the driver supports CUDA {driver_cuda[0]}.{driver_cuda[1]}, but llama-server was built with "
            f"CUDA {build_cuda[0]}.{build_cuda[1]}: it will find no usable GPU and run on the CPU"
        )
    return None


def arch_problem(compute_capability: str | None, build_archs: str | None) -> str | None:
    """Why a GPU of ``compute_capability`` (``"12.0"``) is not covered by a build for
    ``build_archs`` (``"89;90"``), or None (unknown values are not judged)."""
    if not compute_capability or not build_archs:
        return None
    cc = compute_capability.replace(".", "")
    built = {_arch_number(a) for a in build_archs.split(";") if a}
    if cc in built:
        return None
    return f"the GPU is compute capability {compute_capability} (sm_{cc}); the build has only sm_" + ", sm_".join(
        sorted(built, key=int)
    )
