"""The CUDA build path without a GPU: fake toolkits (an nvcc script, cuBLAS and CUDA runtime
files), a real loader failure (a binary linked against a library the loader cannot find), and
the build planner's decisions. Nothing here compiles llama.cpp."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_fakes import fake_toolkit

from orchestrator.errors import UserError
from orchestrator.native import build as native_build
from orchestrator.native import cuda as native_cuda
from orchestrator.native import cuda_compat
from orchestrator.native import plan as native_plan
from orchestrator.native.capabilities import library_env, probe_capabilities
from orchestrator.native.pin import Pin


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


@pytest.fixture
def no_gpu_no_wheels(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No NVML GPU and no cuBLAS wheel on this interpreter; the toolkit decides."""
    monkeypatch.setattr(native_cuda, "detect_gpu_archs", lambda: [])
    monkeypatch.setattr(native_cuda, "site_dirs", lambda: [tmp_path / "no-site-packages"])


# --- --cuda-arch spellings -------------------------------------------------------------------


def test_cuda_arch_accepts_cmake_and_nvml_spellings() -> None:
    assert native_cuda.parse_cuda_arch("120-real") == "120-real"
    assert native_cuda.parse_cuda_arch("120-virtual;89") == "89;120-virtual"
    assert native_cuda.parse_cuda_arch("12.0") == "120"
    assert native_cuda.parse_cuda_arch("8.9,9.0") == "89;90"
    with pytest.raises(UserError):
        native_cuda.parse_cuda_arch("12.x")


# --- toolkit versions ------------------------------------------------------------------------


def test_versions_parse_from_nvcc_smi_and_nvml() -> None:
    assert cuda_compat.parse_release("Cuda compilation tools, release 13.0, V13.0.88") == (13, 0)
    assert cuda_compat.parse_release("CUDA Version: 12.8") == (12, 8)
    assert cuda_compat.parse_release(12080) == (12, 8)
    assert cuda_compat.parse_release("no version") is None


def test_sm120_with_cuda_12_4_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_gpu_no_wheels
) -> None:
    """A 5090 (detected, or asked for) with an older toolkit: the message says what is needed,
    instead of CMake's 'Unsupported gpu architecture' (or 'unknown CUDA architecture')."""
    toolkit = fake_toolkit(tmp_path / "cuda-12.4", "12.4", ("80", "86", "89", "90"), cublas_major=12)
    monkeypatch.setenv("CUDA_HOME", str(toolkit))
    for backend, arch in (("cuda", "120"), ("cuda", "12.0")):
        with pytest.raises(UserError, match=r"sm_120 needs CUDA 12\.8 or newer; this nvcc is CUDA 12\.4"):
            native_plan.plan_build(backend, arch)
    monkeypatch.setattr(native_cuda, "detect_gpu_archs", lambda: ["120"])
    with pytest.raises(UserError, match=r"sm_120 needs CUDA 12\.8"):
        native_plan.plan_build("auto", None)
    cuda_compat.check_arch_toolkit("89;90", (12, 4))  # a 4090 builds with 12.4


# --- cuBLAS of the right major -----------------------------------------------------------------


def test_cublas_of_another_major_is_not_taken(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _touch(site / "nvidia/cublas/include/cublas_v2.h")
    _touch(site / "nvidia/cublas/lib/libcublas.so.12")
    _touch(site / "nvidia/cublas/lib/libcublasLt.so.12")
    assert native_cuda.find_cublas(None, [site], major=13) is None
    assert native_cuda.find_cublas(None, [site], major=12) is not None
    _touch(site / "nvidia/cu13/include/cublas_v2.h")
    lib13 = _touch(site / "nvidia/cu13/lib/libcublas.so.13")
    _touch(site / "nvidia/cu13/lib/libcublasLt.so.13")
    found = native_cuda.find_cublas(None, [site], major=13)
    assert found is not None and found.lib == lib13
    # an unversioned link is followed to its version
    real = _touch(tmp_path / "tk/lib64/libcublas.so.12.8.4")
    (tmp_path / "tk/lib64/libcublas.so").symlink_to(real.name)
    assert cuda_compat.library_major(tmp_path / "tk/lib64/libcublas.so") == 12


def test_cuda12_cublas_with_nvcc13_fails_and_names_the_right_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_gpu_no_wheels
) -> None:
    toolkit = fake_toolkit(tmp_path / "cuda-13.0", "13.0", ("89", "90", "120"), cublas_major=12)
    monkeypatch.setenv("CUDA_HOME", str(toolkit))
    with pytest.raises(UserError) as err:
        native_plan.plan_build("cuda", "120")
    assert "cuBLAS 12 at" in str(err.value) and "does not match nvcc's CUDA 13" in str(err.value)
    assert (err.value.hint or "").startswith("pip install nvidia-cublas ")
    # a 12.8 toolkit without cuBLAS is told the CUDA 12 wheel, not the CUDA 13 one
    old = fake_toolkit(tmp_path / "cuda-12.8", "12.8", ("89", "90", "120"))
    monkeypatch.setenv("CUDA_HOME", str(old))
    with pytest.raises(UserError) as err:
        native_plan.plan_build("cuda", "120")
    assert "pip install nvidia-cublas-cu12" in (err.value.hint or "")


# --- the planner: toolkit root, runtime folders, portable, auto -------------------------------


def test_cmake_is_told_the_toolkit_and_children_its_runtime_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_gpu_no_wheels
) -> None:
    toolkit = fake_toolkit(tmp_path / "cuda-13.0", "13.0", ("89", "90", "120"), cublas_major=13)
    monkeypatch.setenv("CUDA_HOME", str(toolkit))
    plan = native_plan.plan_build("cuda", "120")
    assert plan.defines["CUDAToolkit_ROOT"] == str(toolkit)
    assert plan.defines["CMAKE_CUDA_COMPILER"] == str(toolkit / "bin" / "nvcc")
    assert plan.defines["GGML_NATIVE"] == "OFF"  # no -march=native in a binary meant to be copied
    assert plan.runtime_lib_dirs == [str(toolkit / "lib64")]
    assert f"-DCUDAToolkit_ROOT={toolkit}" in plan.cmake_flags()


def test_auto_with_a_gpu_but_no_nvcc_refuses_instead_of_a_cpu_build(
    monkeypatch: pytest.MonkeyPatch, no_gpu_no_wheels
) -> None:
    monkeypatch.setattr(native_cuda, "find_nvcc", lambda: None)
    monkeypatch.setattr(native_cuda, "detect_gpu_archs", lambda: ["120"])
    with pytest.raises(UserError, match="nvcc is not found") as err:
        native_plan.plan_build("auto", None)
    assert "--backend cpu" in (err.value.hint or "")
    assert native_plan.plan_build("cpu", None).backend == "cpu"  # asked for on purpose
    monkeypatch.setattr(native_cuda, "detect_gpu_archs", lambda: [])
    assert native_plan.plan_build("auto", None).backend == "cpu"  # no GPU: CPU is right


# --- a binary the loader cannot start ----------------------------------------------------------

_MAIN_C = r"""
#include <stdio.h>
#include <string.h>
int fake_cublas_version(void);
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--help") == 0) {
        printf("--spec-type TYPE    none, draft-mtp\n");
        return 0;
    }
    fprintf(stderr, "version: 0.5.0-dev (build 0, commit 0c1e570)\n");
    return fake_cublas_version() == 13 ? 0 : 1;
}
"""


@pytest.fixture
def needs_cublas(tmp_path: Path) -> tuple[Path, Path]:
    """(a build root whose ``build/bin/llama-server`` needs ``libcublas.so.13``, the folder
    holding that library). Compiled with the C compiler; no rpath, so the loader finds the
    library only through ``LD_LIBRARY_PATH``, as with a CUDA toolkit from pip or a runfile."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        pytest.skip("no C compiler")
    libdir = tmp_path / "site/nvidia/cu13/lib"
    libdir.mkdir(parents=True)
    (tmp_path / "lib.c").write_text("int fake_cublas_version(void) { return 13; }\n")
    subprocess.run(
        [cc, "-shared", "-fPIC", "-Wl,-soname,libcublas.so.13", "-o", libdir / "libcublas.so.13", tmp_path / "lib.c"],
        check=True,
    )
    built = tmp_path / "root/build/bin"
    built.mkdir(parents=True)
    (tmp_path / "main.c").write_text(_MAIN_C)
    subprocess.run(
        [cc, "-o", built / "llama-server", tmp_path / "main.c", f"-L{libdir}", "-l:libcublas.so.13"], check=True
    )
    shutil.copy2(built / "llama-server", built / "ggml-rpc-server")  # the build installs the RPC worker too
    return tmp_path / "root", libdir


def _cuda_plan(runtime_lib_dirs: list[str]) -> native_plan.BuildPlan:

    pin = Pin("pkg", "1.0", "0" * 64, "vendor/llama.cpp", "ggml-org/llama.cpp", "0c1e57098")
    defines = native_plan.cmake_defines("cuda", "0c1e570", {"CMAKE_CUDA_ARCHITECTURES": "120"})
    return native_plan.BuildPlan(
        pin, [], "cuda", "120", "gcc", "release 13.0", defines, runtime_lib_dirs=runtime_lib_dirs
    )


@pytest.mark.native
def test_a_build_whose_binary_cannot_start_is_not_a_success(
    needs_cublas: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loader error was recorded as the version and the build reported success."""
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    root, _libdir = needs_cublas
    with pytest.raises(UserError) as err:
        native_build.install(root, _cuda_plan([]), 1.0)
    assert "exit 127" in str(err.value) and "libcublas.so.13" in str(err.value)
    assert "rebuild" not in (err.value.hint or "").replace("a rebuild does not help", "")
    assert not (root / "bin").exists()  # nothing installed, current.json untouched


@pytest.mark.native
def test_recorded_runtime_folders_let_the_build_and_its_children_start(
    needs_cublas: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    root, libdir = needs_cublas
    bin_dir = native_build.install(root, _cuda_plan([str(libdir)]), 1.0)
    manifest = json.loads((bin_dir / "manifest.json").read_text())
    assert manifest["runtime_lib_dirs"] == [str(libdir)]
    assert manifest["version"].startswith("version: 0.5.0-dev")
    info = native_build.BuildInfo(bin_dir, bin_dir / "llama-server", bin_dir, manifest)
    assert library_env(info)["LD_LIBRARY_PATH"].split(":") == [str(bin_dir), str(libdir)]
    assert probe_capabilities(info).draft_mtp  # the --help probe runs with those folders
    # the same build without the recorded folders: `up` names the library, not a rebuild
    bare = native_build.BuildInfo(bin_dir, bin_dir / "llama-server", bin_dir, {**manifest, "runtime_lib_dirs": []})
    os.utime(bin_dir / "llama-server")  # a fresh probe, not the cached --help
    (bin_dir / "llama-server").write_bytes((bin_dir / "llama-server").read_bytes() + b"\0")
    with pytest.raises(UserError) as err:
        probe_capabilities(bare)
    assert "cannot find libcublas.so.13" in str(err.value)
    assert "--force" not in (err.value.hint or "")


@pytest.mark.native
@pytest.mark.slow
def test_cmake_configures_the_planned_cuda_build_with_the_real_nvcc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pinned_source: Path
) -> None:
    """Configure only (about 10 s; no compile): the planned flags with this machine's nvcc and a
    cuBLAS wheel layout (empty files: configure only looks for them). CMake takes the toolkit we
    name and no -march=native."""
    nvcc = native_cuda.find_nvcc()
    if nvcc is None or shutil.which("cmake") is None or shutil.which("ninja") is None:
        pytest.skip("needs nvcc, cmake and ninja")
    wheel = tmp_path / "site/nvidia/cu13"
    for name in ("include/cublas_v2.h", "lib/libcublas.so.13", "lib/libcublasLt.so.13"):
        (wheel / name).parent.mkdir(parents=True, exist_ok=True)
        (wheel / name).write_bytes(b"")
    monkeypatch.setattr(native_cuda, "site_dirs", lambda: [tmp_path / "site"])
    monkeypatch.setattr(native_cuda, "detect_gpu_archs", lambda: [])
    release = cuda_compat.parse_release(native_cuda.nvcc_version(nvcc))
    if release is None or release[0] != 13:
        pytest.skip("the fake wheel is the CUDA 13 layout")
    plan = native_plan.plan_build("cuda", "120")
    result = subprocess.run(
        ["cmake", "-S", str(pinned_source), "-B", str(tmp_path / "build"), "-G", "Ninja", *plan.cmake_flags()],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    cache = (tmp_path / "build" / "CMakeCache.txt").read_text()
    root = native_cuda.toolkit_root(nvcc)
    assert f"CUDAToolkit_BIN_DIR:PATH={root}/bin" in cache
    assert "GGML_NATIVE:BOOL=OFF" in cache
    assert "CMAKE_CUDA_ARCHITECTURES=120" in result.stdout


@pytest.mark.native
def test_the_in_process_runtime_preloads_the_recorded_cuda_libraries(needs_cublas: tuple[Path, Path]) -> None:
    """libllama loaded in-process (llama-cpp-python) needs the same runtime folders as the
    children, but LD_LIBRARY_PATH cannot reach this process's loader any more: the recorded
    libraries are loaded by path first, and the library that needs them then loads by soname."""
    import ctypes

    root, libdir = needs_cublas
    cc = shutil.which(os.environ.get("CC", "cc"))
    assert cc is not None
    (root / "llama.c").write_text(
        "int fake_cublas_version(void);\nint llama_probe(void) { return fake_cublas_version(); }\n"
    )
    libllama = root / "libfakellama.so"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-o", libllama, root / "llama.c", f"-L{libdir}", "-l:libcublas.so.13"], check=True
    )
    probe = [sys.executable, "-c", f"import ctypes; print(ctypes.CDLL({str(libllama)!r}).llama_probe())"]
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    failed = subprocess.run(probe, capture_output=True, text=True, env=env, check=False)
    assert failed.returncode != 0 and "libcublas.so.13" in failed.stderr  # not findable by soname
    info = native_build.BuildInfo(root, root / "llama-server", root, {"runtime_lib_dirs": [str(libdir)]})
    assert native_build.preload_runtime_libraries(info) == [str(libdir / "libcublas.so.13")]
    assert ctypes.CDLL(str(libllama)).llama_probe() == 13
