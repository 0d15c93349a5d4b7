"""This machine: its GPUs, its processes, its TCP ports, and the run file of a running ``up``.

Owns facts about and actions on the host that every layer above may need; knows nothing of
models.yaml or llama.cpp.

Concern -> file:
    GPUs and free memory (NVML, nvidia-smi)        gpus.py
    spawn/stop child process groups, no orphans    process.py
    is a fixed port free, who holds it, pick one   ports.py
    ``run.json`` of a running orchestrator         statefile.py
"""
