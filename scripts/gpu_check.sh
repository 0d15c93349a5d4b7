#!/usr/bin/env bash
# One prepared command: measure MTP decode speed on this machine's NVIDIA GPU (no arguments needed).
#   scripts/gpu_check.sh                      # GPU, full Qwen3.6-35B-A3B shapes, 9-minute limit
#   scripts/gpu_check.sh --time-limit 300     # any scripts/gpu_check.py option passes through
#   scripts/gpu_check.sh --cpu --scale small  # the CPU pipeline check the test suite runs
#
# Python: the repo's .venv when it has everything, else this python3 when it does, else the
# packages it lacks are installed from the bundle's wheels into .gpu-site/ (no network; a bare
# box has Python 3.12 with numpy, httpx, psutil, typer, rich, jinja2, uvloop, prometheus-client,
# nvidia-ml-py and matplotlib). The pinned llama.cpp source comes from the cached sdist, else
# from the bundle's trimmed source (scripts/make_gpu_bundle.py makes bundle/; GPU_BUNDLE=DIR
# points elsewhere). A build carried in with the repo: --bin-dir DIR or ORCHESTRATOR_BIN_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE=${GPU_BUNDLE:-bundle}
# everything `orchestrator up` and the generators import (run with the repo on PYTHONPATH)
NEED="import gguf, numpy, uvicorn, fastapi, orchestrator.serve.run, orchestrator.cli.app, orchestrator.models.shaped"
t0=$(date +%s)

if [[ -x .venv/bin/python ]] && PYTHONPATH=$PWD .venv/bin/python -c "$NEED" 2>/dev/null; then
    PY=.venv/bin/python
elif PYTHONPATH=$PWD python3 -c "$NEED" 2>/dev/null; then
    PY=python3
else
    PY=python3
    if ! PYTHONPATH=$PWD/.gpu-site:$PWD python3 -c "$NEED" 2>/dev/null; then
        if ! compgen -G "$BUNDLE/wheels/*.whl" >/dev/null; then
            echo "error: python3 lacks packages ($NEED) and $BUNDLE/wheels has no wheels" >&2
            echo "  fix: on a machine with network run scripts/make_gpu_bundle.py and bring bundle/ along" >&2
            exit 2
        fi
        echo "== python packages from $BUNDLE/wheels -> .gpu-site"
        python3 -m pip install --quiet --no-index --no-deps --upgrade --target .gpu-site "$BUNDLE"/wheels/*.whl
    fi
    export PYTHONPATH=$PWD/.gpu-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

if [[ -z ${ORCHESTRATOR_SOURCE_BUNDLE:-} ]] && compgen -G "$BUNDLE/llama.cpp-*.tar.xz" >/dev/null; then
    ORCHESTRATOR_SOURCE_BUNDLE=$(ls "$BUNDLE"/llama.cpp-*.tar.xz | head -n 1)
    export ORCHESTRATOR_SOURCE_BUNDLE=$(realpath "$ORCHESTRATOR_SOURCE_BUNDLE")
fi
echo "== python setup: $(( $(date +%s) - t0 )) s ($PY, $($PY --version 2>&1))"
exec "$PY" scripts/gpu_check.py "$@"
