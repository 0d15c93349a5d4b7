"""CUDA toolchain facts for the native build: nvcc, compute capabilities, cuBLAS, libcuda.

Pure functions (``parse_cuda_arch``, ``find_cublas``, ``cuda_defines``) take what they look
at as arguments so tests can run them on literal strings and fake directory trees; the
``detect_*`` helpers read the real machine.

Why the cuBLAS search: ``-DGGML_CUDA=ON`` needs ``CUDA::cublas`` at configure time, and
many machines get CUDA from pip wheels rather than a full toolkit (the ``nvidia-cublas``
wheel ships ``nvidia/cu13/{include,lib}``, older ones ``nvidia/cublas/{include,lib}``).
When cuBLAS is found only in a wheel, CMake is pointed at it explicitly.
"""

from __future__ import annotations

import ctypes.util
import os
import re
import shutil
import site
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import UserError
from orchestrator.native.cuda_compat import cublas_install_hint, library_major

# Compute capability per common GPU (for hints; the build uses what NVML reports).
ARCH_BY_GPU = {"RTX 5090": "120", "RTX 4090": "89", "A100": "80", "H100": "90", "H200": "90"}
ARCH_HINT = "pass --cuda-arch with a compute capability: " + ", ".join(f"{g}={a}" for g, a in ARCH_BY_GPU.items())
# Used when nvcc cannot list its architectures (nvcc 12 and 13 together).
KNOWN_ARCHS = frozenset(
    [
        "50",
        "52",
        "53",
        "60",
        "61",
        "62",
        "70",
        "72",
        "75",
        "80",
        "86",
        "87",
        "88",
        "89",
        "90",
        "100",
        "101",
        "103",
        "110",
        "120",
        "121",
    ]
)
# Wheel layouts holding cuBLAS, newest first, relative to a site-packages folder.
CUBLAS_WHEEL_DIRS = ("nvidia/cu13", "nvidia/cu12", "nvidia/cublas")


@dataclass(frozen=True)
class Cublas:
    """Where cuBLAS was found: ``source`` is ``"toolkit"`` or ``"wheel"``."""

    source: str
    include: Path
    lib: Path
    lt_lib: Path


def parse_cuda_arch(text: str, supported: frozenset[str] | set[str] = KNOWN_ARCHS) -> str:
    """Normalise ``--cuda-arch`` (``"120"``, ``"89;90"``, ``"89,90"``, ``"90a"``, CMake's
    ``"120-real"``/``"120-virtual"``, or a compute capability ``"12.0"``) to CMake's
    ``CMAKE_CUDA_ARCHITECTURES`` form (``;``-joined, sorted, unique).

    Raises ``UserError`` for an entry that is not a compute capability ``supported`` knows.
    """
    items = [_dotted(t) for t in re.split(r"[;,\s]+", text.strip()) if t]
    if not items:
        raise UserError("empty --cuda-arch", hint=ARCH_HINT)
    for item in items:
        match = re.fullmatch(r"(\d+)([af]?)(-real|-virtual)?", item)
        if match is None or match.group(1) not in supported:
            known = " ".join(sorted(supported, key=int))
            raise UserError(
                f"unknown CUDA architecture {item!r} in --cuda-arch {text!r}",
                hint=f"{ARCH_HINT} (this nvcc knows: {known})",
            )
    return ";".join(sorted(set(items), key=lambda a: (int(re.sub(r"\D", "", a)), a)))


def _dotted(item: str) -> str:
    """A compute capability as NVML and nvidia-smi print it (``"12.0"``) -> ``"120"``."""
    match = re.fullmatch(r"(\d+)\.(\d)([af]?)", item)
    return f"{match.group(1)}{match.group(2)}{match.group(3)}" if match else item


def arch_from_capability(major: int, minor: int) -> str:
    """NVML's compute capability (12, 0) -> CMake's ``"120"``."""
    return f"{major}{minor}"


def find_cublas(toolkit: Path | None, site_dirs: list[Path], major: int | None = None) -> Cublas | None:
    """Find cuBLAS headers + ``libcublas`` + ``libcublasLt``: the toolkit first, then pip wheels.

    Args:
        toolkit: the CUDA toolkit root (holding ``bin/nvcc``), or None.
        site_dirs: site-packages folders to search for the ``nvidia-cublas`` wheel.
        major: nvcc's CUDA major version; a cuBLAS of another major (``libcublas.so.12`` with
            nvcc 13) is skipped: it would not match the CUDA runtime the build links. None
            takes any.
    Returns None when no candidate has all three pieces (of that major).
    """
    for found in all_cublas(toolkit, site_dirs):
        lib_major = library_major(found.lib)
        if major is None or lib_major is None or lib_major == major:
            return found
    return None


def all_cublas(toolkit: Path | None, site_dirs: list[Path]) -> list[Cublas]:
    """Every cuBLAS found (any CUDA major), the toolkit's first, then the wheels'."""
    found: list[Cublas] = []
    if toolkit is not None:
        incs = [toolkit / "include", *sorted(toolkit.glob("targets/*/include"))]
        libs = [toolkit / "lib64", toolkit / "lib", *sorted(toolkit.glob("targets/*/lib"))]
        found += _cublas_in(incs, libs, "toolkit")
    for base in site_dirs:
        for sub in CUBLAS_WHEEL_DIRS:
            found += _cublas_in([base / sub / "include"], [base / sub / "lib"], "wheel")
    return found


def _cublas_in(incs: list[Path], libs: list[Path], source: str) -> list[Cublas]:
    include = next((d for d in incs if (d / "cublas_v2.h").is_file()), None)
    for lib_dir in libs:
        lib, lt = _newest(lib_dir, "libcublas.so"), _newest(lib_dir, "libcublasLt.so")
        if include and lib and lt:
            return [Cublas(source, include, lib, lt)]
    return []


def _newest(folder: Path, stem: str) -> Path | None:
    """``libX.so`` if present, else the versioned ``libX.so.N`` with the highest N."""
    if (folder / stem).exists():
        return folder / stem
    versions = sorted(folder.glob(stem + ".*"), key=lambda p: [int(x) for x in re.findall(r"\d+", p.name[len(stem) :])])
    return versions[-1] if versions else None


def cuda_defines(arch: str, cublas: Cublas, have_libcuda: bool, toolkit: Path | None = None) -> dict[str, str]:
    """CMake ``-D`` entries for a CUDA build (the ``cuda`` preset leaf adds ``GGML_CUDA=ON``).

    ``CUDAToolkit_ROOT`` names the toolkit our planner chose (``$CUDA_HOME`` included): CMake's
    ``FindCUDAToolkit`` does not read ``CUDA_HOME`` and would otherwise take whatever nvcc it
    finds first. A wheel-only cuBLAS gets explicit library paths and include flags; without a
    driver library (``libcuda``) to link, VMM is compiled out (``GGML_CUDA_NO_VMM``), as checked
    on a toolkit without cuBLAS or stubs. A real GPU machine keeps VMM.
    """
    defs = {"CMAKE_CUDA_ARCHITECTURES": arch}
    if toolkit is not None:
        defs["CUDAToolkit_ROOT"] = str(toolkit)
    if cublas.source == "wheel":
        defs["CUDA_cublas_LIBRARY"] = str(cublas.lib)
        defs["CUDA_cublasLt_LIBRARY"] = str(cublas.lt_lib)
        defs["CMAKE_CUDA_FLAGS"] = f"-I{cublas.include}"
        defs["CMAKE_CXX_FLAGS"] = f"-I{cublas.include}"
    if not have_libcuda:
        defs["GGML_CUDA_NO_VMM"] = "ON"
    return defs


# --- reading the machine --------------------------------------------------------------------


def find_nvcc() -> Path | None:
    """nvcc from ``$CUDA_HOME``/``$CUDA_PATH``, ``PATH`` or ``/usr/local/cuda``; None if absent."""
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env) and (Path(os.environ[env]) / "bin" / "nvcc").is_file():
            return Path(os.environ[env]) / "bin" / "nvcc"
    found = shutil.which("nvcc")
    if found:
        return Path(found)
    default = Path("/usr/local/cuda/bin/nvcc")
    return default if default.is_file() else None


def toolkit_root(nvcc: Path) -> Path | None:
    """The toolkit folder holding ``include/cuda_runtime.h`` for this nvcc (which may be a
    wrapper script on PATH), or None."""
    for cand in (nvcc.resolve().parent.parent, Path("/usr/local/cuda")):
        if (cand / "include" / "cuda_runtime.h").is_file() or any(cand.glob("targets/*/include/cuda_runtime.h")):
            return cand
    return None


def nvcc_version(nvcc: Path) -> str:
    """nvcc's release line, e.g. ``Cuda compilation tools, release 13.0, V13.0.88``."""
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=False).stdout
    lines = [line for line in out.splitlines() if "release" in line]
    return lines[-1].strip() if lines else out.strip()


def nvcc_archs(nvcc: Path) -> frozenset[str]:
    """Compute capabilities this nvcc can target (``nvcc --list-gpu-arch``); KNOWN_ARCHS if it
    cannot say."""
    result = subprocess.run([str(nvcc), "--list-gpu-arch"], capture_output=True, text=True, check=False)
    archs = frozenset(re.findall(r"compute_(\d+)", result.stdout))
    return archs or KNOWN_ARCHS


def detect_gpu_archs() -> list[str]:
    """Compute capabilities of the visible NVIDIA GPUs via NVML (sorted, unique); [] when there
    is no driver or no GPU."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        archs = set()
        for i in range(pynvml.nvmlDeviceGetCount()):
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(pynvml.nvmlDeviceGetHandleByIndex(i))
            archs.add(arch_from_capability(major, minor))
        return sorted(archs, key=int)
    except pynvml.NVMLError:
        return []
    finally:
        pynvml.nvmlShutdown()


def have_libcuda(toolkit: Path | None) -> bool:
    """True when a driver library (``libcuda``) or the toolkit's link stub is available."""
    if ctypes.util.find_library("cuda"):
        return True
    if toolkit is None:
        return False
    return any(toolkit.glob("lib*/stubs/libcuda.so")) or any(toolkit.glob("targets/*/lib/stubs/libcuda.so"))


def site_dirs() -> list[Path]:
    """site-packages folders of this interpreter (venv, system, user) that exist."""
    dirs = [*site.getsitepackages(), site.getusersitepackages(), *sys.path]
    seen: list[Path] = []
    for d in dirs:
        path = Path(d)
        if path.is_dir() and path not in seen:
            seen.append(path)
    return seen


def require_cublas(toolkit: Path | None, major: int | None = None) -> Cublas:
    """``find_cublas`` on this machine for nvcc's CUDA ``major``, or ``UserError`` naming the
    wheel to install (and the cuBLAS of another major it found, if any)."""
    dirs = site_dirs()
    found = find_cublas(toolkit, dirs, major)
    if found is None:
        where = toolkit or "no CUDA toolkit"
        others = [f"cuBLAS {library_major(c.lib)} at {c.lib}" for c in all_cublas(toolkit, dirs)]
        wrong = f"; found only {', '.join(others)}, which does not match nvcc's CUDA {major}" if others else ""
        raise UserError(
            f"cuBLAS{f' for CUDA {major}' if major else ''} not found (looked in {where} and in site-packages "
            f"nvidia/*){wrong}; --backend cuda needs it",
            hint=cublas_install_hint(major),
        )
    return found


def runtime_lib_dirs(toolkit: Path | None, cublas: Cublas | None) -> list[str]:
    """Folders the built llama-server's loader needs beyond its own: the CUDA runtime
    (``libcudart``) of the toolkit and a wheel's cuBLAS. A toolkit from pip, conda or a runfile
    is not on the system loader's path, and without them llama-server exits 127 at start."""
    dirs: list[Path] = []
    if cublas is not None:
        dirs.append(cublas.lib.parent)
    if toolkit is not None:
        for folder in [toolkit / "lib64", toolkit / "lib", *sorted(toolkit.glob("targets/*/lib"))]:
            if _newest(folder, "libcudart.so") is not None:
                dirs.append(folder)
                break
    unique: list[str] = []
    for d in dirs:
        if str(d) not in unique:
            unique.append(str(d))
    return unique
