#!/usr/bin/env bash
# The main job on a fresh machine: install, build the pinned llama.cpp, generate the tiny MTP demo
# model, and serve it behind one OpenAI-compatible endpoint (Ctrl-C stops everything).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
. .venv/bin/activate
orchestrator build
exec orchestrator up "$@"
