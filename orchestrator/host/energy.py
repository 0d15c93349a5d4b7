"""Energy the GPUs of an instance used, from NVML (``pynvml``, the nvidia-ml-py package).

``nvmlDeviceGetTotalEnergyConsumption`` is the driver's integral of the board's power draw
(millijoules since it loaded; Volta and later), so the energy of one request is the difference
of two readings around it, with no sampling thread and no sampling error. Without NVML, a GPU
or that counter, ``EnergyMeter.open`` returns None and nothing is measured (a CPU run).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any


class EnergyMeter:
    """Reads the summed energy counter of some GPUs (NVML indices). Use :meth:`open`."""

    def __init__(self, nvml: Any, handles: list[Any]) -> None:
        self._nvml = nvml
        self._handles = handles

    @classmethod
    def open(cls, indices: Sequence[int], nvml: Any = None) -> EnergyMeter | None:
        """A meter over GPUs ``indices``, or None when NVML, a GPU or its energy counter is missing.
        ``nvml``: the pynvml module (a test passes a fake)."""
        if not indices:
            return None
        if nvml is None:
            try:
                import pynvml
            except ImportError:
                return None
            nvml = pynvml
        try:
            nvml.nvmlInit()
        except Exception:  # NVMLError and its driver-missing subclasses: no GPU to measure
            return None
        try:
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
            meter = cls(nvml, handles)
            meter.joules()
        except Exception:  # an index NVML does not know, or a GPU without the counter
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
            return None
        return meter

    def joules(self) -> float:
        """Energy the GPUs used since their driver loaded (J)."""
        return sum(float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self._handles) / 1000.0

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._nvml.nvmlShutdown()
