#!/usr/bin/env bash
# The main job on a fresh machine: install, build the pinned llama.cpp, generate the tiny MTP demo
# model, and serve it behind one OpenAI-compatible endpoint (Ctrl-C stops everything).
# Arguments go to `orchestrator up`; a `-c FILE` goes to `orchestrator build` too (its build: block).
set -euo pipefail
cd "$(dirname "$0")/.."
config=()
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    -c | --config) [ $((i + 1)) -lt ${#args[@]} ] && config=(-c "${args[i + 1]}") ;;
    --config=*) config=(-c "${args[i]#--config=}") ;;
  esac
done
bash scripts/install.sh
. .venv/bin/activate
orchestrator build ${config[@]+"${config[@]}"}
exec orchestrator up "$@"
