"""Which NVIDIA GPUs this machine has, and how much memory is free on each.

Sources, in order: NVML (``pynvml`` from the nvidia-ml-py package), then
``nvidia-smi --query-gpu=... --format=csv,noheader,nounits`` parsed by the pure function
``parse_nvidia_smi``, then none (CPU). A fact a source does not report (``[N/A]``, e.g.
memory on unified-memory boards) stays ``None``: it is never guessed (after llama-swap's
``internal/hw``).

Indices are the driver's (PCI bus order, as nvidia-smi prints them); the launch plan sets
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` for its children so CUDA numbers them the same way. When
the orchestrator itself runs with ``CUDA_VISIBLE_DEVICES`` set, only those GPUs are offered.
"""

from __future__ import annotations

import contextlib
import csv
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MIB = 1024 * 1024
SMI_FIELDS = ("index", "name", "uuid", "memory.total", "memory.free", "compute_cap")
CPU_SOURCE = "none (CPU)"


@dataclass(frozen=True)
class GPU:
    """One GPU. Memory in bytes; ``compute_capability`` like ``"12.0"``; None = not reported."""

    index: int
    name: str
    uuid: str | None
    memory_total: int | None
    memory_free: int | None
    compute_capability: str | None


def detect_gpus() -> tuple[list[GPU], str]:
    """List the GPUs and say where the list came from.

    Returns:
        (gpus, source): source is ``"nvml"``, ``"nvidia-smi"`` or ``"none (CPU)"`` (with the
        reason the others gave nothing, e.g. ``"none (CPU): no NVIDIA driver (NVML: ...)"``).
        Never raises: no GPU is a normal state.
    """
    reasons: list[str] = []
    gpus, why = _from_nvml()
    source = "nvml"
    if gpus is None:
        reasons.append(f"NVML: {why}")
        gpus, why = _from_nvidia_smi()
        source = "nvidia-smi"
        if gpus is None:
            reasons.append(f"nvidia-smi: {why}")
            return [], f"{CPU_SOURCE}: " + "; ".join(reasons)
    if not gpus:
        return [], f"{CPU_SOURCE}: {source} reports no GPUs"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        gpus = filter_visible(gpus, visible)
        source += f" (CUDA_VISIBLE_DEVICES={visible!r})"
        if not gpus:
            return [], f"{CPU_SOURCE}: CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
    return gpus, source


def filter_visible(gpus: list[GPU], visible: str) -> list[GPU]:
    """Keep the GPUs named in a ``CUDA_VISIBLE_DEVICES`` value (indices or ``GPU-`` UUIDs).

    CUDA stops at the first entry it cannot match, and so does this.
    """
    keep: list[GPU] = []
    for entry in (e.strip() for e in visible.split(",")):
        if not entry:
            break
        match = [
            g for g in gpus if (entry.isdigit() and g.index == int(entry)) or (g.uuid and g.uuid.startswith(entry))
        ]
        if len(match) != 1:
            break
        if match[0] not in keep:
            keep.append(match[0])
    return keep


def parse_nvidia_smi(text: str, fields: tuple[str, ...] = SMI_FIELDS) -> list[GPU]:
    """Parse ``nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`` output.

    Memory columns are MiB (converted to bytes). ``[N/A]``, ``N/A``, ``[Not Supported]`` and
    empty fields become None. Lines that do not have one value per field are skipped.
    Raises nothing.
    """
    gpus: list[GPU] = []
    for row in csv.reader(text.splitlines(), skipinitialspace=True):
        if len(row) != len(fields):
            continue
        values = {f: _na(v) for f, v in zip(fields, row, strict=True)}
        index = _int(values.get("index"))
        if index is None:
            continue
        total = _int(values.get("memory.total"))
        free = _int(values.get("memory.free"))
        gpus.append(
            GPU(
                index=index,
                name=values.get("name") or "unknown GPU",
                uuid=values.get("uuid"),
                memory_total=total * MIB if total is not None else None,
                memory_free=free * MIB if free is not None else None,
                compute_capability=values.get("compute_cap"),
            )
        )
    return gpus


def _na(value: str) -> str | None:
    value = value.strip()
    if not value or value.strip("[]").lower() in ("n/a", "not supported", "unknown error", "insufficient permissions"):
        return None
    return value


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(float(value))
    except ValueError:
        return None


def _from_nvidia_smi() -> tuple[list[GPU] | None, str]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, "not installed"
    fields: tuple[str, ...] = SMI_FIELDS
    for _ in range(2):
        try:
            out = subprocess.run(
                [exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as err:
            return None, str(err)
        if out.returncode == 0:
            return parse_nvidia_smi(out.stdout, fields), ""
        if "compute_cap" in out.stdout + out.stderr and "compute_cap" in fields:
            # drivers before 510 do not know the compute_cap field
            fields = tuple(f for f in fields if f != "compute_cap")
            continue
        # every line: a driver/library mismatch says why on the first line and only the
        # library's version on the last
        said = [line.strip() for line in (out.stderr + "\n" + out.stdout).splitlines() if line.strip()]
        return None, " / ".join(said[:4]) if said else f"exit status {out.returncode}"
    return None, "unsupported query"


def _from_nvml() -> tuple[list[GPU] | None, str]:
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        return None, str(err) or "no NVIDIA driver"
    except OSError as err:  # libnvidia-ml.so missing on some pynvml versions
        return None, str(err)
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            gpus.append(
                GPU(
                    index=i,
                    name=_text(_nvml(pynvml.nvmlDeviceGetName, handle)) or "unknown GPU",
                    uuid=_text(_nvml(pynvml.nvmlDeviceGetUUID, handle)),
                    memory_total=_mem(pynvml, handle, "total"),
                    memory_free=_mem(pynvml, handle, "free"),
                    compute_capability=_cc(pynvml, handle),
                )
            )
        return gpus, ""
    except pynvml.NVMLError as err:
        return None, str(err)
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _nvml(fn: Callable[[Any], Any], handle: Any) -> Any:
    """``fn(handle)``, or None when NVML does not support the query on this GPU."""
    import pynvml

    try:
        return fn(handle)
    except pynvml.NVMLError:
        return None


def _text(value: object) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _mem(pynvml, handle, which: str) -> int | None:  # type: ignore[no-untyped-def]
    info = _nvml(pynvml.nvmlDeviceGetMemoryInfo, handle)
    return int(getattr(info, which)) if info is not None else None


def _cc(pynvml, handle) -> str | None:  # type: ignore[no-untyped-def]
    cc = _nvml(pynvml.nvmlDeviceGetCudaComputeCapability, handle)
    return f"{cc[0]}.{cc[1]}" if cc else None


def describe(gpus: list[GPU]) -> list[str]:
    """One line per GPU for people: ``"0: NVIDIA GeForce RTX 5090 (cc 12.0), 30.1 / 31.8 GiB free"``."""
    lines = []
    for g in gpus:
        free = f"{g.memory_free / 2**30:.1f}" if g.memory_free is not None else "?"
        total = f"{g.memory_total / 2**30:.1f}" if g.memory_total is not None else "?"
        cc = f" (cc {g.compute_capability})" if g.compute_capability else ""
        lines.append(f"{g.index}: {g.name}{cc}, {free} / {total} GiB free")
    return lines


_BANNER = re.compile(r"Driver Version:\s*([\d.]+).*?CUDA Version:\s*([\d.]+)", re.DOTALL)


def parse_smi_banner(text: str) -> tuple[str | None, str | None]:
    """(driver version, the newest CUDA version it supports) from plain ``nvidia-smi`` output's
    header ``| NVIDIA-SMI 570.86.10   Driver Version: 570.86.10   CUDA Version: 12.8 |``."""
    m = _BANNER.search(text)
    return (m.group(1), m.group(2)) if m else (None, None)


def driver_versions() -> tuple[str | None, str | None]:
    """(driver version, the newest CUDA version the driver supports, e.g. ``"12.8"``) from NVML,
    else from plain ``nvidia-smi``; (None, None) when neither answers. Never raises."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            cuda = int(pynvml.nvmlSystemGetCudaDriverVersion_v2())
            return _text(pynvml.nvmlSystemGetDriverVersion()), f"{cuda // 1000}.{(cuda % 1000) // 10}"
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML, no driver, an old pynvml: try nvidia-smi
        pass
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, None
    try:
        out = subprocess.run([exe], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None, None
    return parse_smi_banner(out.stdout)
