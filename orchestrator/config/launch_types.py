"""The llama-server resource keys of one model in models.yaml (``ModelConfig`` takes them from
``ModelLaunchKeys``): threads, batches, KV cache types and the host-memory prompt cache.

Each key is tri-state: a value is passed as its flag, null (or absent) leaves the flag out, so
llama-server's own default applies; ``orchestrator up --dry-run`` and ``orchestrator status`` say
what that default is (read from the binary's ``--help``) and what llama-server reports it runs with.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

#: The KV cache types the pin's ``--cache-type-k/-v`` accept (common/arg.cpp, ``kv_cache_types``).
KvCacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]


class ModelLaunchKeys(BaseModel):
    """Per-model llama-server resource flags; null = llama-server's default."""

    threads: int | None = Field(
        None,
        ge=1,
        description=(
            "CPU threads (-t); null = llama-server's default (a thread per core). Where several llama-servers "
            "compute on the CPU at once (replicas, several loaded models, experts kept on the CPU), give them "
            "threads that add up to at most the cores: ggml's threads spin at every barrier, and on 2 cores busy "
            "with other work a 2-thread server took 6-22x the time of a 1-thread one for the same requests "
            "(the demo model)"
        ),
    )
    batch_size: int | None = Field(None, ge=1, description="logical batch, tokens (-b); null = llama-server's 2048")
    ubatch_size: int | None = Field(
        None,
        ge=1,
        description="physical batch: prompt tokens per prefill step (-ub); null = llama-server's 512; "
        "2048 is the published agent recipe on an RTX 5090 (orchestrator tune measures it)",
    )
    cache_type_k: KvCacheType | None = Field(
        None,
        description="KV cache type of K (--cache-type-k); quantized types need the model's head size divisible "
        "by 32 and flash attention not off; null = llama-server's default (f16)",
    )
    cache_type_v: KvCacheType | None = Field(
        None,
        description="KV cache type of V (--cache-type-v); quantized types need flash attention (-fa auto or on) "
        "and the head size divisible by 32; null = llama-server's default (f16)",
    )
    cache_ram: int | None = Field(
        None,
        ge=-1,
        description="host-memory prompt cache in MiB (--cache-ram): idle slots' prompts kept for reuse; "
        "0 = off, -1 = no limit; null = llama-server's default (8192)",
    )
