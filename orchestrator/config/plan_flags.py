"""Flags and environment variables the launch plan sets itself, each with the models.yaml key that controls it.

``ModelConfig`` refuses them in ``extra_args`` and ``env``: they would fight the plan, so the
error names the key to use instead.
"""

from __future__ import annotations

# Flags the launch plan sets itself, and the models.yaml key that controls each one.
# Spellings from common/arg.cpp of the pin. llama.cpp turns '_' into '-' in `--` flags.
PLAN_FLAGS: dict[str, str] = {
    "-m": "path",
    "--model": "path",
    "-a": "aliases (the plan passes --alias <name>)",
    "--alias": "aliases (the plan passes --alias <name>)",
    "--host": "server.host (children always bind 127.0.0.1)",
    "--port": "port",
    "-c": "ctx_size",
    "--ctx-size": "ctx_size",
    "-np": "parallel",
    "--parallel": "parallel",
    "-t": "threads",
    "--threads": "threads",
    "-ngl": "gpu_layers",
    "--gpu-layers": "gpu_layers",
    "--n-gpu-layers": "gpu_layers",
    "-sm": "gpus (one list = one process split by layer; the fit check assumes it)",
    "--split-mode": "gpus (one list = one process split by layer; the fit check assumes it)",
    "-mg": "gpus (the plan picks the devices; CUDA_VISIBLE_DEVICES numbers them from 0)",
    "--main-gpu": "gpus (the plan picks the devices; CUDA_VISIBLE_DEVICES numbers them from 0)",
    "-dev": "gpus (the plan picks the devices through CUDA_VISIBLE_DEVICES)",
    "--device": "gpus (the plan picks the devices through CUDA_VISIBLE_DEVICES)",
    "-ts": "gpus (several GPUs in one list = --tensor-split)",
    "--tensor-split": "gpus (several GPUs in one list = --tensor-split)",
    "--spec-type": "speculative.type",
    "--spec-draft-n-max": "speculative.n_max",
    "--spec-draft-n-min": "speculative.n_min",
    "--spec-draft-p-min": "speculative.p_min",
    "--draft-p-min": "speculative.p_min",
    "--draft-max": "speculative.n_max",
    "--draft-min": "speculative.n_min",
    "--draft-n-min": "speculative.n_min",
    "--draft-n": "speculative.n_max",
    "--spec-draft-model": "speculative.draft",
    "--spec-ngram-mod-n-match": "speculative.ngram_mod.n_match",
    "--spec-ngram-mod-n-min": "speculative.ngram_mod.n_min",
    "--spec-ngram-mod-n-max": "speculative.ngram_mod.n_max",
    "-md": "speculative.draft",
    "--model-draft": "speculative.draft",
    "--slot-save-path": "kv_persist (the plan keeps saved prompt caches under the orchestrator's cache)",
    "--metrics": "nothing (the plan always passes --metrics)",
    "-lv": "nothing (GPU instances log at verbosity 4: readiness reads where the weights went)",
    "--verbosity": "nothing (GPU instances log at verbosity 4: readiness reads where the weights went)",
    "--log-verbosity": "nothing (GPU instances log at verbosity 4: readiness reads where the weights went)",
    "--rpc": "rpc",
    "--sse-ping-interval": "nothing (the plan pings silent streams every 5 s, a long prefill included)",
    "-b": "batch_size",
    "--batch-size": "batch_size",
    "-ub": "ubatch_size",
    "--ubatch-size": "ubatch_size",
    "--spec-draft-backend-sampling": "speculative.backend_sampling",
    "--no-spec-draft-backend-sampling": "speculative.backend_sampling",
}

# Child environment variables that would override the plan (llama.cpp reads LLAMA_ARG_*).
PLAN_ENV: dict[str, str] = {
    "CUDA_VISIBLE_DEVICES": "gpus",
    "CUDA_DEVICE_ORDER": "gpus",
    "LLAMA_ARG_MODEL": "path",
    "LLAMA_ARG_SPLIT_MODE": "gpus",
    "LLAMA_ARG_LOG_VERBOSITY": "nothing (GPU instances log at verbosity 4)",
    "LLAMA_ARG_MAIN_GPU": "gpus",
    "LLAMA_ARG_DEVICE": "gpus",
    "LLAMA_ARG_HOST": "server.host",
    "LLAMA_ARG_PORT": "port",
    "LLAMA_ARG_RPC": "rpc",
    "LLAMA_ARG_SPEC_TYPE": "speculative.type",
    "LLAMA_ARG_SPEC_DRAFT_N_MAX": "speculative.n_max",
    "LLAMA_ARG_SPEC_DRAFT_N_MIN": "speculative.n_min",
    "LLAMA_ARG_SPEC_DRAFT_P_MIN": "speculative.p_min",
    "LLAMA_ARG_SPEC_DRAFT_MODEL": "speculative.draft",
}
