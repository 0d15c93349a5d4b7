"""What a native build will be: CMake flags from presets, the build key, the backend and
toolchain of this machine. ``plan_build`` reads the machine; the rest are pure functions.

The key names one build folder: a hash of everything that changes the binaries (pin,
patches, backend, CUDA architectures, compiler and nvcc versions, CMake defines). Compiler
launchers (ccache) are kept out of it: they change how fast, not what.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import UserError
from orchestrator.native import cuda as native_cuda
from orchestrator.native import cuda_compat
from orchestrator.native import fetch as native_fetch
from orchestrator.native.pin import Patch, Pin

# CMake cache entries: "base" for every build, plus one leaf per backend (after Ollama's
# CMakePresets.json). Compiler launchers are added separately: they do not change the output.
PRESETS: dict[str, dict[str, str]] = {
    "base": {
        "CMAKE_BUILD_TYPE": "Release",
        "LLAMA_BUILD_TESTS": "OFF",
        "LLAMA_BUILD_EXAMPLES": "OFF",
        "LLAMA_CURL": "OFF",
        # in-tree libraries are found through $ORIGIN, so bin/ can be copied out of the tree
        "CMAKE_BUILD_RPATH_USE_ORIGIN": "ON",
        # the RPC backend: llama-server's --rpc, and the ggml-rpc-server worker (`orchestrator worker`)
        "GGML_RPC": "ON",
    },
    "cpu": {},
    # GGML_NATIVE=OFF: no -march=native, so the binaries run on another machine's CPU (a CUDA
    # build is the one copied to GPU boxes). The CPU build stays tuned to the machine it serves.
    "cuda": {"GGML_CUDA": "ON", "GGML_NATIVE": "OFF"},
}


@dataclass
class BuildPlan:
    """Everything that decides the build's output, plus the tools that run it."""

    pin: Pin
    patches: list[Patch]
    backend: str
    cuda_arch: str | None
    compiler: str
    nvcc: str | None
    defines: dict[str, str]
    launchers: dict[str, str] = field(default_factory=dict)
    # folders the built llama-server's loader needs (CUDA runtime, a wheel's cuBLAS); they do
    # not change the binaries, so they stay out of the key
    runtime_lib_dirs: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return build_key(self.pin, self.patches, self.backend, self.cuda_arch, self.compiler, self.nvcc, self.defines)

    def cmake_flags(self) -> list[str]:
        return [f"-D{k}={v}" for k, v in {**self.defines, **self.launchers}.items()]


def cmake_defines(backend: str, commit: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Preset base + backend leaf + the version stamp + ``extra`` (e.g. ``cuda_defines``).

    The sdist has no git history, so the commit llama-server prints is passed explicitly.
    """
    if backend not in PRESETS or backend == "base":
        raise UserError(f"unknown backend {backend!r}", hint="use --backend auto, cpu or cuda")
    return {
        **PRESETS["base"],
        **PRESETS[backend],
        "LLAMA_BUILD_COMMIT": commit,
        "LLAMA_BUILD_NUMBER": "0",
        **(extra or {}),
    }


def build_key(
    pin: Pin,
    patches: list[Patch],
    backend: str,
    cuda_arch: str | None,
    compiler: str,
    nvcc: str | None,
    defines: dict[str, str],
) -> str:
    """``<backend>-<12 hex>`` naming one build: a hash of the pin, each patch's name and sha256,
    the backend, CUDA architectures, compiler (and nvcc) versions and the CMake defines."""
    blob = json.dumps(
        {
            "pin": pin.as_dict(),
            "patches": [[p.name, p.sha256] for p in patches],
            "backend": backend,
            "cuda_arch": cuda_arch,
            "compiler": compiler,
            "nvcc": nvcc,
            "defines": defines,
        },
        sort_keys=True,
    )
    return f"{backend}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def resolve_backend(requested: str, gpu_archs: list[str], nvcc: Path | None, cuda_arch: str | None) -> str:
    """``auto`` -> ``cuda`` when a GPU and nvcc are present (or ``--cuda-arch`` was given),
    ``cpu`` when there is no GPU.

    Raises ``UserError`` for an unknown backend, ``cuda`` without nvcc, and ``auto`` on a
    machine with a GPU but no nvcc: a silent CPU build would become the current build and run
    a large model on the CPU; ``--backend cpu`` says that is wanted.
    """
    if requested == "auto":
        if nvcc is None and gpu_archs:
            raise UserError(
                f"an NVIDIA GPU is here (sm_{', sm_'.join(gpu_archs)}) but nvcc is not found, so --backend auto "
                "cannot build for it",
                hint="install the CUDA toolkit (or set CUDA_HOME to it) and run again, "
                "or pass --backend cpu to build for the CPU on purpose",
            )
        requested = "cuda" if nvcc is not None and (gpu_archs or cuda_arch) else "cpu"
    if requested not in ("cpu", "cuda"):
        raise UserError(f"unknown backend {requested!r}", hint="use --backend auto, cpu or cuda")
    if requested == "cpu" and cuda_arch:
        raise UserError("--cuda-arch applies only to a CUDA build", hint="add --backend cuda, or drop --cuda-arch")
    if requested == "cuda" and nvcc is None:
        raise UserError(
            "nvcc not found; --backend cuda needs the CUDA toolkit's compiler",
            hint="install the CUDA toolkit (or set CUDA_HOME), or build with --backend cpu",
        )
    return requested


def _tool(name: str, hint: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise UserError(f"{name} not found on PATH (needed to build llama.cpp)", hint=hint)
    return found


def compiler_version() -> str:
    """First line of ``$CXX --version`` (the C++ compiler CMake will pick). Raises ``UserError``
    when there is none."""
    cxx = _tool(os.environ.get("CXX", "c++"), "install a C/C++ compiler (apt install build-essential)")
    _tool(os.environ.get("CC", "cc"), "install a C/C++ compiler (apt install build-essential)")
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout
    return out.splitlines()[0].strip() if out else cxx


def plan_build(backend: str, cuda_arch: str | None, *, patched: bool = True) -> BuildPlan:
    """Read the pin, patches and this machine's toolchain into a ``BuildPlan``; ``patched=False``
    plans the pinned source without ``native/patches`` (its own key), as a stock llama.cpp of the
    same commit is: what serving through an adopted llama-server is tested with.

    Raises ``UserError`` for missing cmake/ninja/compiler, nvcc or cuBLAS (CUDA), or an
    unknown CUDA architecture.
    """
    pin, patches = native_fetch.load_pin(), native_fetch.list_patches() if patched else []
    _tool("cmake", "install CMake >= 3.14 (apt install cmake, or pip install cmake)")
    _tool("ninja", "install Ninja (apt install ninja-build, or pip install ninja)")
    compiler = compiler_version()
    nvcc = native_cuda.find_nvcc()
    gpu_archs = native_cuda.detect_gpu_archs() if backend == "auto" or (backend == "cuda" and not cuda_arch) else []
    backend = resolve_backend(backend, gpu_archs, nvcc, cuda_arch)
    extra: dict[str, str] = {}
    nvcc_ver = arch = None
    runtime_dirs: list[str] = []
    if backend == "cuda":
        assert nvcc is not None
        nvcc_ver = native_cuda.nvcc_version(nvcc)
        release = cuda_compat.parse_release(nvcc_ver)
        arch = _cuda_arch(nvcc, cuda_arch, gpu_archs, release)
        toolkit = native_cuda.toolkit_root(nvcc)
        cublas = native_cuda.require_cublas(toolkit, release[0] if release else None)
        extra = native_cuda.cuda_defines(arch, cublas, native_cuda.have_libcuda(toolkit), toolkit)
        extra["CMAKE_CUDA_COMPILER"] = str(toolkit / "bin" / "nvcc" if toolkit else nvcc)
        runtime_dirs = native_cuda.runtime_lib_dirs(toolkit, cublas)
    defines = cmake_defines(backend, pin.short_commit, extra)
    plan = BuildPlan(pin, patches, backend, arch, compiler, nvcc_ver, defines, runtime_lib_dirs=runtime_dirs)
    ccache = shutil.which("ccache")
    if ccache:
        langs = ["C", "CXX"] + (["CUDA"] if backend == "cuda" else [])
        plan.launchers = {f"CMAKE_{lang}_COMPILER_LAUNCHER": ccache for lang in langs}
    return plan


def _cuda_arch(nvcc: Path, requested: str | None, detected: list[str], release: tuple[int, int] | None) -> str:
    """The architectures to build: ``--cuda-arch`` or the GPUs'; one newer than this nvcc is
    refused by name (sm_120 needs CUDA 12.8) before nvcc's own list or CMake can confuse."""
    if not requested and not detected:
        raise UserError("no NVIDIA GPU detected to choose the CUDA architectures", hint=native_cuda.ARCH_HINT)
    arch = native_cuda.parse_cuda_arch(requested) if requested else ";".join(detected)
    cuda_compat.check_arch_toolkit(arch, release)
    return native_cuda.parse_cuda_arch(arch, native_cuda.nvcc_archs(nvcc)) if requested else arch
