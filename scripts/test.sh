#!/usr/bin/env bash
# Installs, builds the native llama.cpp (cached outside the repo, keyed by pin, patches and flags)
# and runs the whole test suite against real llama-server processes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
. .venv/bin/activate
orchestrator build --backend cpu
export ORCHESTRATOR_REQUIRE_NATIVE=1
exec python -m pytest "$@"
