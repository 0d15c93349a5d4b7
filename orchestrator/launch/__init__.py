"""The launch plan: from models.yaml, GPUs and the server's capabilities to one ``InstanceSpec``
per llama-server, with its exact command line. Pure: it starts no process (the caller probes
the server once, ``native.capabilities``) and refuses bad plans before anything runs.

Concern -> file:
    the plan (``plan_launch``), speculation rule    plan.py
    ``InstanceSpec`` and relaunch variants           spec.py
    argv rendered from ``ServerArgs``                argv.py
    GGUF files of an entry, builtin models, forks    files.py
    what an entry needs of our llama.cpp patches     needs.py
    GPU placement, tensor split                      placement.py
    memory fit check                                 fit.py
"""
