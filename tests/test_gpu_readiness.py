"""A GPU instance whose llama-server fell back to the CPU is not ready on the GPU.

The real llama-server of the CPU build plays the CUDA build that found no usable GPU (old
driver, libcuda missing): given ``-ngl all`` it warns "no usable GPU found, --gpu-layers option
will be ignored", loads on the CPU and answers ``/health`` 200.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from supervision_helpers import fast_policy, make_config, real_spec, wait_state

from orchestrator.supervise.readiness import OffloadWatch, parse_offloaded
from orchestrator.supervise.supervisor import ProcessState, Supervisor


def _watch(*lines: str) -> OffloadWatch:
    watch = OffloadWatch()
    for line in lines:
        watch.line(line)
    return watch


def test_offload_lines_are_judged() -> None:
    """Literal lines of the pinned llama.cpp (common/arg.cpp, src/llama-model.cpp)."""
    assert parse_offloaded("load_tensors: offloaded 41/41 layers to GPU") == (41, 41)
    assert parse_offloaded("load_tensors: CPU_Mapped model buffer size = 100.00 MiB") is None
    assert _watch("load_tensors: offloaded 41/41 layers to GPU").problem("all") is None
    assert _watch("load_tensors: offloaded 20/41 layers to GPU").problem("20") is None
    assert _watch("load_tensors: offloaded 99/41 layers to GPU").problem("99") is None
    assert "20/41" in (_watch("load_tensors: offloaded 20/41 layers to GPU").problem("all") or "")
    assert "0/41" in (_watch("load_tensors: offloaded 0/41 layers to GPU").problem("all") or "")
    no_gpu = "warning: no usable GPU found, --gpu-layers option will be ignored"
    assert "no usable GPU found" in (_watch(no_gpu).problem("all") or "")
    assert "never logged" in (_watch("load_tensors: CPU model buffer size = 1 MiB").problem("all") or "")
    assert _watch(no_gpu).problem(None) is None  # a CPU instance may run on the CPU
    watch = _watch(no_gpu)
    watch.reset()
    watch.line("load_tensors: offloaded 41/41 layers to GPU")
    assert watch.problem("all") is None  # a new launch forgets the last one's log


@pytest.mark.server
def test_gpu_instance_that_loaded_on_cpu_fails_instead_of_ready(tmp_path: Path, bin_info, demo_model) -> None:
    """A spec placed on GPU 0 with ``-ngl all``, run by a build without a usable GPU: FAILED with
    llama.cpp's own warning, never READY (before: READY on GPU 0, really on the CPU)."""

    async def main() -> None:
        spec = real_spec(bin_info.server, bin_info.lib_dir, demo_model)
        spec = dataclasses.replace(spec, gpus=(0,), server=dataclasses.replace(spec.server, gpu_layers="all"))
        sup = Supervisor([spec], make_config(), log_dir=tmp_path, policy=fast_policy())
        inst = sup.instances[0]
        seen: list[ProcessState] = []
        inst._on_change = lambda i: seen.append(i.state)
        await sup.start()
        try:
            await wait_state(inst, {ProcessState.FAILED, ProcessState.READY}, timeout=120)
        finally:
            await sup.stop(5)
        assert ProcessState.READY not in seen
        assert inst.state is ProcessState.FAILED
        assert "runs on the CPU" in (inst.message or "") and "no usable GPU found" in (inst.message or "")
        assert inst.restarts == 0  # a relaunch cannot help

    asyncio.run(main())
