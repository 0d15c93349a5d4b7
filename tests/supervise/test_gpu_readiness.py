"""A GPU instance whose llama-server fell back to the CPU is not ready on the GPU.

The real llama-server of the CPU build plays the CUDA build that found no usable GPU (old
driver, libcuda missing): given ``-ngl all`` it loads on the CPU and answers ``/health`` 200.
Built with the RPC backend it even logs "offloaded N/N layers to GPU"; at ``-lv 4`` (which the
plan passes to GPU instances) its model buffers say ``CPU_Mapped``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from supervision_helpers import fast_policy, make_config, real_spec, wait_state

from orchestrator.supervise.readiness import OffloadWatch, parse_model_buffer, parse_offloaded
from orchestrator.supervise.supervisor import ProcessState, Supervisor


def _watch(*lines: str) -> OffloadWatch:
    watch = OffloadWatch()
    for line in lines:
        watch.line(line)
    return watch


CUDA_LOAD = (
    "load_tensors: offloaded 41/41 layers to GPU",
    "load_tensors:        CUDA0 model buffer size = 21337.02 MiB",
    "load_tensors:   CPU_Mapped model buffer size =   515.62 MiB",
)


def test_offload_lines_are_judged() -> None:
    """Literal lines of the pinned llama.cpp (common/arg.cpp, src/llama-model.cpp at -lv 4)."""
    assert parse_offloaded("load_tensors: offloaded 41/41 layers to GPU") == (41, 41)
    assert parse_model_buffer("load_tensors:        CUDA0 model buffer size = 21337.02 MiB") == "CUDA0"
    assert parse_model_buffer("llama_kv_cache:      CUDA0 KV buffer size = 704.00 MiB") is None
    assert _watch(*CUDA_LOAD).verdict("all") == (None, None)
    partial = ("load_tensors: offloaded 20/41 layers to GPU", CUDA_LOAD[1])
    assert _watch(*partial).verdict("20") == (None, None)
    assert "20/41" in (_watch(*partial).problem("all") or "")
    # a build with the RPC backend says "offloaded 6/6" with no GPU: the buffers tell the truth
    rpc_cpu = ("load_tensors: offloaded 6/6 layers to GPU", "load_tensors:   CPU_Mapped model buffer size = 10.04 MiB")
    assert "CPU_Mapped buffers only" in (_watch(*rpc_cpu).problem("all") or "")
    host_only = ("load_tensors:    CUDA_Host model buffer size = 515.62 MiB", rpc_cpu[1])
    assert "runs on the CPU" in (_watch(*host_only).problem("all") or "")
    no_gpu = "warning: no usable GPU found, --gpu-layers option will be ignored"
    assert "no usable GPU found" in (_watch(no_gpu).problem("all") or "")
    problem, warning = _watch("load_tensors: loading model tensors").verdict("all")
    assert problem is None and "not confirmed" in (warning or "")  # a log that says nothing: a warning
    assert _watch(no_gpu).verdict(None) == (None, None)  # a CPU instance may run on the CPU
    assert _watch(*rpc_cpu).verdict("0") == (None, None)  # -ngl 0 keeps the weights on the host on purpose
    watch = _watch(no_gpu)
    watch.reset()
    for line in CUDA_LOAD:
        watch.line(line)
    assert watch.problem("all") is None  # a new launch forgets the last one's log


@pytest.mark.native
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
        assert "runs on the CPU" in (inst.message or ""), inst.message
        assert inst.restarts == 0  # a relaunch cannot help

    asyncio.run(main())
