"""``orchestrator doctor``: is this machine ready to build and serve? One line per check.

Each check says OK, WARN (works, but something is missing or slow) or FAIL (something
will not work), and how to fix it. The exit status is 1 when any check fails. Checks only
look: nothing is built, downloaded or generated.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator import paths
from orchestrator.errors import UserError
from orchestrator.host import disk, gpus
from orchestrator.host.gpus import GPU
from orchestrator.native import cuda as native_cuda
from orchestrator.native import cuda_compat, registry
from orchestrator.native import fetch as native_fetch
from orchestrator.native.versions import KnownBad, describe_pin, known_bad, parse_version

if TYPE_CHECKING:
    from orchestrator.native.build import BuildInfo

OK, WARN, FAIL = "OK", "WARN", "FAIL"
STYLE = {OK: "green", WARN: "yellow", FAIL: "red"}
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8080


@dataclass(frozen=True)
class Check:
    """One doctor line: ``status`` is OK, WARN or FAIL; ``fix`` says what to do (None when OK)."""

    name: str
    status: str
    detail: str
    fix: str | None = None


def run(config: Path) -> int:
    """Run every check for ``config`` (models.yaml; it may be absent) and print one line each.

    Returns 1 when any check FAILs, else 0.
    """
    from rich.console import Console

    console = Console(soft_wrap=True)
    checks = collect(config)
    for c in checks:
        fix = f"  [dim]fix:[/dim] {c.fix}" if c.fix else ""
        console.print(f"[{STYLE[c.status]}]{c.status:<4}[/] {c.name:<13} {c.detail}{fix}", highlight=False)
    return 1 if any(c.status == FAIL for c in checks) else 0


def collect(config: Path) -> list[Check]:
    """All checks, in display order."""
    build = _locate(config)
    has_build = build is not None
    found, gpu_check = check_gpus()
    gpu_count = len(found)
    steps: list[Callable[[], Check]] = [
        check_python,
        lambda: check_tool("cmake", "--version", has_build, "apt install cmake (or pip install cmake)"),
        lambda: check_tool("ninja", "--version", has_build, "apt install ninja-build (or pip install ninja)"),
        lambda: check_tool("c++", "--version", has_build, "apt install build-essential"),
        check_ccache,
        lambda: check_nvcc(gpu_count),
        lambda: gpu_check,
        check_pin,
        lambda: check_build(build, gpu_count),
        lambda: check_gpu_build(build, found),
        lambda: check_config(config),
        lambda: check_port(config),
        check_demo_model,
        lambda: check_folder("state folder", paths.state_dir(), "ORCHESTRATOR_STATE"),
        lambda: check_folder("cache folder", paths.cache_root(), "ORCHESTRATOR_CACHE"),
    ]
    return [step() for step in steps]


def check_folder(name: str, folder: Path, env: str) -> Check:
    """A folder the orchestrator writes to is writable and not nearly full (``host/disk.py``).

    ``up`` keeps serving without it (logs stay in memory, run.json goes stale), so this WARNs.
    """
    problem = disk.folder_problem(folder)
    if problem is not None:
        return Check(name, WARN, problem, f"free space there, fix its rights, or set {env} to another folder")
    return Check(name, OK, str(folder))


def check_python() -> Check:
    version = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info < (3, 11):  # noqa: UP036 - says what to do instead of failing on a syntax error
        return Check("python", FAIL, version, "use Python 3.11 or newer")
    return Check("python", OK, f"{version} ({sys.executable})")


def _first_line(argv: list[str]) -> str:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"({err})"
    lines = (result.stdout or result.stderr).strip().splitlines()
    return lines[0] if lines else ""


def check_tool(name: str, version_flag: str, has_build: bool, fix: str) -> Check:
    """A build tool: missing is FAIL without a native build, WARN with one (rebuilds need it)."""
    path = shutil.which(name)
    if path is None:
        return Check(name, WARN if has_build else FAIL, "not found (needed by `orchestrator build`)", fix)
    return Check(name, OK, _first_line([path, version_flag]))


def check_ccache() -> Check:
    path = shutil.which("ccache")
    if path is None:
        return Check(
            "ccache", WARN, "not found: every rebuild compiles from scratch (8+ min on 2 cores)", "apt install ccache"
        )
    return Check("ccache", OK, _first_line([path, "--version"]))


def check_nvcc(gpu_count: int) -> Check:
    """nvcc and a cuBLAS of the same CUDA major: WARN when a CUDA build is impossible."""
    nvcc = native_cuda.find_nvcc()
    if nvcc is None:
        if gpu_count:
            return Check(
                "nvcc",
                WARN,
                "not found, but a GPU is here: `orchestrator build` cannot make a CUDA build (--backend auto refuses)",
                "install the CUDA toolkit (or set CUDA_HOME to it); --backend cpu builds for the CPU on purpose",
            )
        return Check("nvcc", OK, "not found (not needed without a GPU)")
    version = native_cuda.nvcc_version(nvcc)
    release = cuda_compat.parse_release(version)
    major = release[0] if release else None
    toolkit = native_cuda.toolkit_root(nvcc)
    cublas = native_cuda.find_cublas(toolkit, native_cuda.site_dirs(), major)
    if cublas is None:
        others = native_cuda.all_cublas(toolkit, native_cuda.site_dirs())
        why = "no cuBLAS (a CUDA build needs it)"
        if others:
            found = ", ".join(f"cuBLAS {cuda_compat.library_major(c.lib)} at {c.lib}" for c in others)
            why = f"{found} does not match nvcc's CUDA {major} (a CUDA build needs cuBLAS {major})"
        return Check("nvcc", WARN, f"{nvcc}: {version}; {why}", cuda_compat.cublas_install_hint(major))
    return Check("nvcc", OK, f"{nvcc}: {version}; cuBLAS from the {cublas.source} ({cublas.lib})")


def check_gpus() -> tuple[list[GPU], Check]:
    """(the GPUs, the check line). No GPU is OK: everything runs on CPU; a driver that is
    installed but fails (nvidia-smi present, no GPU listed) is a WARN with its reason."""
    found, source = gpus.detect_gpus()
    if not found:
        if shutil.which("nvidia-smi") and "not installed" not in source.split("nvidia-smi:")[-1]:
            return [], Check(
                "gpus", WARN, f"{source}; models run on CPU", "fix the NVIDIA driver (reboot after a driver update)"
            )
        return [], Check("gpus", OK, f"{source}; models run on CPU")
    driver, cuda = gpus.driver_versions()
    said = f", driver {driver} (CUDA {cuda})" if driver else ""
    detail = f"{len(found)} via {source}{said}: " + "; ".join(gpus.describe(found))
    return found, Check("gpus", OK, detail)


def check_gpu_build(build: BuildInfo | None, found: list[GPU]) -> Check:
    """Whether the driver and every GPU can run the CUDA build: the driver's CUDA version
    against the build's nvcc, each GPU's compute capability against the build's architectures."""
    manifest = build.manifest if build is not None else {}
    if not found or manifest.get("backend") != "cuda":
        return Check("gpu + build", OK, "nothing to compare (no GPU, or not a CUDA build)")
    _, driver_cuda = gpus.driver_versions()
    build_cuda = cuda_compat.parse_release(manifest.get("nvcc"))
    problems = []
    if problem := cuda_compat.driver_problem(cuda_compat.parse_release(driver_cuda), build_cuda):
        problems.append((problem, "update the NVIDIA driver, or build with a toolkit the driver supports"))
    for gpu in found:
        if problem := cuda_compat.arch_problem(gpu.compute_capability, manifest.get("cuda_arch")):
            arch = (gpu.compute_capability or "").replace(".", "")
            problems.append((f"GPU {gpu.index}: {problem}", f"orchestrator build --backend cuda --cuda-arch {arch}"))
    if problems:
        return Check("gpu + build", FAIL, "; ".join(p for p, _ in problems), "; ".join(f for _, f in problems))
    return Check("gpu + build", OK, f"driver CUDA {driver_cuda or '?'}, build {manifest.get('cuda_arch')}")


def _locate(config: Path) -> BuildInfo | None:
    """models.yaml's ``build.llama_server`` when it names one (adopted), else our last build."""
    from orchestrator.native.build import adopt, locate

    try:
        from orchestrator.config.load import load_config

        named = load_config(config).build.llama_server if config.is_file() else None
    except UserError:
        named = None  # the config check reports it
    try:
        if named:
            path = Path(named).expanduser()
            return adopt(path if path.is_absolute() else config.parent / path)
        return locate()
    except UserError:
        return None


def check_pin() -> Check:
    """The pinned llama.cpp as users compare it with upstream: build number and date, and the
    newest source the registry has (one short request; offline says so)."""
    try:
        pin = native_fetch.load_pin()
    except UserError as err:
        return Check("llama.cpp pin", FAIL, str(err), err.hint)
    age = registry.describe(pin, registry.newest(pin.package))
    return Check(
        "llama.cpp pin",
        OK,
        f"{describe_pin(pin.commit, pin.build, pin.date)} of {pin.repo} ({pin.package} {pin.version}); {age}",
    )


def upstream_of(build: BuildInfo) -> tuple[str, list[KnownBad]]:
    """(``b11312 (0c1e570)``, the known-bad windows it falls in) for ``build``: the pin's number
    for our own build (it prints build 0), else what its ``--version`` says."""
    manifest = build.manifest
    pin = native_fetch.load_pin()
    if manifest.get("upstream_commit") == pin.commit:
        return describe_pin(pin.commit, pin.build, pin.date), []
    from orchestrator.native.build import server_version

    try:
        said = parse_version(server_version(build.server, manifest.get("runtime_lib_dirs")))
    except UserError:
        said = None
    if said is None:
        return "unknown upstream build", []
    return f"{said.tag} ({said.commit})", known_bad(said.build)


def check_build(build: BuildInfo | None, gpu_count: int) -> Check:
    """The native build: present, patched with the current queue, runs and knows draft-mtp
    (its ``--help``, probed once), right backend for this machine."""
    if build is None:
        return Check("native build", FAIL, "none found", "orchestrator build")
    manifest = build.manifest
    version = manifest.get("version", "").splitlines()[0] if manifest.get("version") else "no manifest.json"
    upstream, bad = upstream_of(build)
    detail = f"{build.bin_dir} ({manifest.get('backend', '?')}; {upstream}; {version})"
    if bad:
        return Check(
            "native build",
            WARN,
            detail + "; " + "; ".join(b.what for b in bad),
            "use another llama.cpp build (outside that window), or `orchestrator build` for the pinned one",
        )
    if not manifest:
        return Check("native build", WARN, detail, "orchestrator build (records patches and flags in manifest.json)")
    current = [{"name": p.name, "sha256": p.sha256} for p in native_fetch.list_patches()]
    if manifest.get("adopted") or manifest.get("source"):  # a llama.cpp of the user's, with or without our queue
        return _check_adopted(build, detail)
    if manifest.get("patches") != current:
        return Check(
            "native build", WARN, detail + "; built with other patches than native/patches", "orchestrator build"
        )
    from orchestrator.native.capabilities import probe_capabilities

    try:
        capabilities = probe_capabilities(build)
    except UserError as err:
        return Check("native build", FAIL, f"{detail}; {err}", err.hint)
    if not capabilities.draft_mtp:
        return Check(
            "native build", FAIL, detail + "; llama-server does not know --spec-type draft-mtp", "orchestrator build"
        )
    if gpu_count and capabilities.backend != "cuda":
        return Check(
            "native build", WARN, detail + "; a CPU build on a GPU machine", "orchestrator build --backend cuda"
        )
    return Check("native build", OK, detail)


def _check_adopted(build: BuildInfo, detail: str) -> Check:
    """A llama-server of the user's (``build.llama_server``): it runs, knows draft-mtp, and lacks
    our patches' features (a WARN naming them; everything else works)."""
    from orchestrator.native.capabilities import probe_capabilities

    try:
        capabilities = probe_capabilities(build)
    except UserError as err:
        return Check("native build", FAIL, f"{detail}; {err}", err.hint)
    source = (build.manifest or {}).get("source")
    whose = f"build --source {source.get('path')}" if isinstance(source, dict) else "build.llama_server"
    detail = f"yours ({whose}): {detail}"
    if not capabilities.draft_mtp:
        return Check("native build", WARN, detail + "; no --spec-type draft-mtp: models run without MTP", None)
    if capabilities.features_off:
        names = "; ".join(line.split(" (needs", 1)[0] for line in capabilities.features_off)
        return Check(
            "native build", WARN, f"{detail}; {names}", "`orchestrator build` has them (and drop build.llama_server)"
        )
    return Check("native build", OK, detail)


def check_config(config: Path) -> Check:
    if not config.exists():
        return Check("config", WARN, f"{config} not found (defaults apply)", "create models.yaml or pass --config PATH")
    from orchestrator.config.load import load_config

    try:
        cfg = load_config(config)
    except UserError as err:
        return Check("config", FAIL, str(err).replace("\n", " | "), err.hint or f"edit {config}")
    return Check("config", OK, f"{config}: {len(cfg.models)} model(s)")


def configured_address(config: Path) -> tuple[str, int]:
    """``server.host`` and ``server.port`` from the YAML (defaults 127.0.0.1, 8080); read
    leniently so an otherwise invalid file still gets its port checked."""
    host, port = DEFAULT_HOST, DEFAULT_PORT
    if not config.is_file():
        return host, port
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        data = YAML(typ="safe").load(config.read_text())
    except (YAMLError, OSError, ValueError):  # ValueError: not UTF-8 (the config check says so)
        return host, port
    server = data.get("server") if isinstance(data, dict) else None
    if isinstance(server, dict):
        if isinstance(server.get("host"), str):
            host = server["host"]
        value = server.get("port")
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 65535:
            port = value  # an impossible port is the config check's to report, not "free"
    return host, port


def check_port(config: Path) -> Check:
    host, port = configured_address(config)
    if port == 0:
        return Check("port", OK, "server.port is 0: the OS picks one")
    from orchestrator.host.ports import check_port_free  # the same check `up` runs, naming the holder

    try:
        check_port_free(host, port)
    except UserError as err:
        ours = _running_orchestrator_on(port)
        if ours is not None:
            return Check("port", OK, f"{host}:{port} is served by the running orchestrator (pid {ours})")
        return Check("port", FAIL, str(err), "change server.port, or `orchestrator status` if it is already running")
    return Check("port", OK, f"{host}:{port} is free")


def _running_orchestrator_on(port: int) -> int | None:
    """The pid of a live ``orchestrator up`` whose endpoint uses ``port``, else None."""
    from orchestrator.host import statefile

    data = statefile.read_live()
    if data and str(data.get("endpoint", "")).rstrip("/").endswith(f":{port}"):
        return int(data.get("pid") or 0) or None
    return None


def check_demo_model() -> Check:
    folder = paths.demo_model_dir()
    found = sorted(folder.glob("*.gguf")) if folder.is_dir() else []
    if not found:
        return Check(
            "demo model",
            WARN,
            f"not generated yet ({folder})",
            "orchestrator up generates it on first use, or: orchestrator make-tiny-model",
        )
    return Check("demo model", OK, f"{len(found)} GGUF(s) in {folder}")


__all__ = ["Check", "collect", "configured_address", "run"]
