"""How much memory each device has: GPUs from NVML/nvidia-smi (``host.gpus``), host RAM from psutil.

Devices are named by a short key: ``"cpu"`` for host RAM (models that run on the CPU) and the
GPU index as text (``"0"``, ``"1"``, ...) for each GPU. A fact a source does not report stays
``None``; it is never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.host.gpus import GPU, detect_gpus

CPU = "cpu"


@dataclass(frozen=True)
class DeviceMemory:
    """One device's memory in bytes (``None`` = not reported).

    ``free`` is what the device has free right now, all processes counted (NVML ``free``;
    psutil ``available`` for host RAM, which counts reclaimable page cache as free).
    """

    key: str
    name: str
    total: int | None
    free: int | None


def device_key(gpu_index: int | None) -> str:
    """``"cpu"`` for None, else the GPU index as text."""
    return CPU if gpu_index is None else str(gpu_index)


def host_memory() -> DeviceMemory:
    """Host RAM from psutil (``total`` and ``available``, bytes)."""
    import psutil

    vm = psutil.virtual_memory()
    return DeviceMemory(CPU, "host RAM", int(vm.total), int(vm.available))


def gpu_memory(gpus: list[GPU]) -> list[DeviceMemory]:
    """The memory of each of ``gpus`` as ``DeviceMemory`` rows (keys = GPU indices)."""
    return [DeviceMemory(device_key(g.index), g.name, g.memory_total, g.memory_free) for g in gpus]


def read_devices(gpu_indices: list[int] | None = None) -> dict[str, DeviceMemory]:
    """Measure every device now: host RAM always, plus the GPUs (all, or those in ``gpu_indices``).

    Returns:
        ``{"cpu": DeviceMemory, "0": DeviceMemory, ...}``. Never raises: without a GPU driver
        only ``"cpu"`` is returned.
    """
    devices = {CPU: host_memory()}
    if gpu_indices is None or gpu_indices:
        found, _ = detect_gpus()
        for row in gpu_memory(found):
            if gpu_indices is None or int(row.key) in gpu_indices:
                devices[row.key] = row
    return devices
