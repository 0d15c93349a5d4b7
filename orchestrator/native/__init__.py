"""The native llama.cpp build: the pinned source with our patches, compiled once per build key,
and what the built llama-server can do.

Owns everything between ``native/pin.toml`` + ``native/patches/`` and a runnable llama-server.
Knows nothing of models.yaml, models or processes it supervises.
The build also yields ``ggml-rpc-server`` (llama.cpp's RPC worker); ``rpc.py`` speaks enough of
its protocol to ask a worker its version, devices and free memory.

Concern -> file:
    the pin and the patch queue as values     pin.py
    pin, download, checksum, extract, patch   fetch.py
    CUDA toolchain (nvcc, arch, cuBLAS)       cuda.py
    CUDA versions that go together            cuda_compat.py
    CMake flags, build key, backend choice    plan.py
    running CMake + Ninja, the build log      make.py
    the build on disk: locate, install, runs  build.py
    server capabilities (``--help`` probe)    capabilities.py
    upstream build numbers, known-bad windows versions.py
    what each patch adds, what lacking it costs features.py
    RPC protocol: probe a ggml-rpc-server     rpc.py
"""
