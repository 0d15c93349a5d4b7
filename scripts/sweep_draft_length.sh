#!/usr/bin/env bash
# Find the best MTP draft length K for one model on this machine, end to end:
#   1. install and build llama.cpp (CUDA when an NVIDIA GPU and nvcc are present; the build
#      carries native/patches, including the per-request draft-length patch, so the sweep needs
#      one model load for every K instead of one load per K);
#   2. show the build manifest and the model's GGUF facts (MTP head, memory estimate);
#   3. sweep K against the no-speculation baseline (orchestrator bench): table, CSV, JSON, PNG;
#   4. with APPLY=1, write the recommended K into models.yaml (comments kept; the diff is printed).
#
# usage: scripts/sweep_draft_length.sh [MODEL] [more `orchestrator bench` options]
# settings (environment): CONFIG=models.yaml  KS=0,1,2,3,4,6,8  PROMPTS=math,code,general
#   PROMPTS_FILE=  (JSONL, {"domain":..., "prompt":...} per line)  N_PREDICT=256  REPS=3
#   SEEDS=0  TEMPERATURE=0  OUT=results/sweep-<model>-<time>  APPLY=0
#   BACKEND= CUDA_ARCH=  (default: the build: block of CONFIG, else auto; auto stops on a GPU without nvcc)
# example: APPLY=1 KS=0,1,2,3,4 scripts/sweep_draft_length.sh qwen3.6-35b-a3b
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=""
if [[ $# -gt 0 && $1 != -* ]]; then
    MODEL=$1
    shift
fi
CONFIG=${CONFIG:-models.yaml}
KS=${KS:-0,1,2,3,4,6,8}
PROMPTS=${PROMPTS:-math,code,general}
N_PREDICT=${N_PREDICT:-256}
REPS=${REPS:-3}
SEEDS=${SEEDS:-0}
TEMPERATURE=${TEMPERATURE:-0}
BACKEND=${BACKEND:-}
STAMP=$(date +%Y%m%d-%H%M%S)
OUT=${OUT:-results/sweep-${MODEL:-default}-$STAMP}

bash scripts/install.sh
. .venv/bin/activate

echo "== 1/4 build (backend: ${BACKEND:-from $CONFIG, else auto})"
build_args=(-c "$CONFIG")
if [[ -n $BACKEND ]]; then
    build_args+=(--backend "$BACKEND")
fi
if [[ -n ${CUDA_ARCH:-} ]]; then
    build_args+=(--cuda-arch "$CUDA_ARCH")
fi
orchestrator build "${build_args[@]}"
orchestrator build --show

echo "== 2/4 model facts"
# The GGUF path as the config resolves it (builtin: models are generated here on first use).
GGUF=$(python - "$CONFIG" "$MODEL" <<'EOF'
import sys
from pathlib import Path
from orchestrator.bench.sweep import pick_model
from orchestrator.config.load import load_config
from orchestrator.launch.files import resolve_model_path
cfg = load_config(Path(sys.argv[1]))
model = pick_model(cfg, sys.argv[2] or None)
print(resolve_model_path(model, cfg.config_dir))
EOF
)
orchestrator inspect "$GGUF"

echo "== 3/4 sweep K=$KS -> $OUT"
bench_args=(--config "$CONFIG" --k "$KS" --prompts "$PROMPTS" --n-predict "$N_PREDICT" --reps "$REPS"
    --seeds "$SEEDS" --temperature "$TEMPERATURE" --out "$OUT")
if [[ -n ${PROMPTS_FILE:-} ]]; then
    bench_args+=(--prompts-file "$PROMPTS_FILE")
fi
if [[ ${APPLY:-0} == 1 ]]; then
    bench_args+=(--apply)
fi
if [[ -n $MODEL ]]; then
    bench_args=("$MODEL" "${bench_args[@]}")
fi
orchestrator bench "${bench_args[@]}" "$@"

echo "== 4/4 results in $OUT: results.json (manifest, per-K statistics, analysis), summary.csv, requests.csv, sweep.png"
if [[ ${APPLY:-0} != 1 ]]; then
    echo "   to write the recommended K into $CONFIG, rerun with APPLY=1 (or add --apply)"
fi
