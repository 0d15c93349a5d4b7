"""Peak memory bandwidth of NVIDIA GPUs from NVML: memory bus width times memory clock.

``peak = 2 * max_memory_clock_hz * bus_width_bits / 8`` bytes/s: NVML reports the memory clock
at half the data rate for every memory kind (HBM3/HBM3e and GDDR6X/GDDR7 alike), e.g. an H100
SXM (5120-bit, 2619 MHz) gives 3.35 TB/s and an RTX 5090 (512-bit, 14001 MHz) 1.79 TB/s, their
datasheet figures. Used by the GPU check to say how close a decode rate comes to the bound.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class GpuMemory:
    """One GPU as NVML describes it; None where NVML does not answer."""

    index: int
    name: str
    compute_capability: str | None  # "9.0"
    memory_total: int | None  # bytes
    bus_width_bits: int | None
    max_memory_clock_mhz: int | None
    driver: str | None
    cuda_driver: str | None  # the CUDA version the driver supports, "13.0"

    @property
    def peak_bandwidth(self) -> float | None:
        """Bytes per second, or None when NVML gave no bus width or clock."""
        if not self.bus_width_bits or not self.max_memory_clock_mhz:
            return None
        return 2.0 * self.max_memory_clock_mhz * 1e6 * self.bus_width_bits / 8.0

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = asdict(self)
        d["peak_bandwidth_bytes_per_s"] = self.peak_bandwidth
        return d


def read_gpus() -> tuple[list[GpuMemory], str]:
    """(GPUs, "") from NVML, or ([], why) when NVML or its driver is missing."""
    try:
        import pynvml
    except ImportError:
        return [], "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError) as err:
        return [], str(err) or "no NVIDIA driver"
    try:
        driver = _call(pynvml.nvmlSystemGetDriverVersion)
        cuda = _call(pynvml.nvmlSystemGetCudaDriverVersion)
        cuda_text = f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            cc = _call(pynvml.nvmlDeviceGetCudaComputeCapability, h)
            mem = _call(pynvml.nvmlDeviceGetMemoryInfo, h)
            out.append(
                GpuMemory(
                    index=i,
                    name=_text(_call(pynvml.nvmlDeviceGetName, h)) or "unknown GPU",
                    compute_capability=f"{cc[0]}.{cc[1]}" if cc else None,
                    memory_total=int(mem.total) if mem is not None else None,
                    bus_width_bits=_call(pynvml.nvmlDeviceGetMemoryBusWidth, h),
                    max_memory_clock_mhz=_call(pynvml.nvmlDeviceGetMaxClockInfo, h, pynvml.NVML_CLOCK_MEM),
                    driver=_text(driver),
                    cuda_driver=cuda_text,
                )
            )
        return out, ""
    except pynvml.NVMLError as err:
        return [], str(err)
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _call(fn: Any, *args: Any) -> Any:
    import pynvml

    try:
        return fn(*args)
    except (pynvml.NVMLError, AttributeError):
        return None


def _text(value: object) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)
