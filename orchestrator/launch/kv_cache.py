"""The KV cache types a model can load with (``cache_type_k``, ``cache_type_v``), checked before launch.

The pin's ``llama_init_from_model`` (src/llama-context.cpp) refuses to create a context, and
llama-server exits at load, when:

- a quantized V cache meets ``-fa off`` ("quantized V cache requires flash_attn to be enabled";
  ``-fa auto``, the default, turns flash attention on for it);
- with flash attention not off, a quantized K (or V) type's block size does not divide the head
  size of every layer ("K cache type q4_0 with block size 32 does not divide n_embd_head_k=16").
  Without flash attention the attention views the K cache per head, which needs the same
  divisibility: measured at the pin, ``-fa off --cache-type-k q8_0`` on 16-wide heads aborts on
  ggml.c's view assertion (exit 134) at the first request.

So the plan refuses such a type, naming the key and the types that load for this model.
"""

from __future__ import annotations

from typing import get_args

from orchestrator.config.launch_types import KvCacheType
from orchestrator.config.schema import Config, ModelConfig
from orchestrator.errors import UserError
from orchestrator.models.facts import ModelFacts

KV_CACHE_TYPES: tuple[str, ...] = get_args(KvCacheType)
_FLOAT_TYPES = ("f32", "f16", "bf16")
_FA_FLAGS = ("-fa", "--flash-attn")


def block_size(kv_type: str) -> int:
    """Elements per block of a KV cache type (1 for the float types): ggml's, as gguf-py lists them."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    return int(GGML_QUANT_SIZES[GGMLQuantizationType[kv_type.upper()]][0])


def flash_attn(extra_args: list[str]) -> str:
    """``on``, ``off`` or ``auto`` (llama-server's default) as ``extra_args`` set ``-fa``."""
    value = "auto"
    for i, arg in enumerate(extra_args):
        flag, _, inline = arg.partition("=")
        if flag in _FA_FLAGS:
            value = inline or (extra_args[i + 1] if i + 1 < len(extra_args) else "auto")
    value = value.lower()
    return "on" if value in ("on", "1", "true", "enabled") else "off" if value in ("off", "0", "false") else "auto"


def loadable(head: int, *, fa: str, v_cache: bool) -> list[str]:
    """The KV cache types that load for heads of ``head`` elements with flash attention ``fa``."""
    quantized_ok = not (v_cache and fa == "off")
    return [t for t in KV_CACHE_TYPES if t in _FLOAT_TYPES or (quantized_ok and head % block_size(t) == 0)]


def check_kv_types(config: Config, i: int, model: ModelConfig, facts: ModelFacts) -> None:
    """Refuse ``cache_type_k``/``cache_type_v`` values this model cannot load with (module docstring).

    Raises:
        UserError: naming the models.yaml line and key, why, and the types that load.
    """
    fa = flash_attn(model.extra_args)
    for key, kv_type, head, v_cache in (
        ("cache_type_k", model.cache_type_k, facts.key_length, False),
        ("cache_type_v", model.cache_type_v, facts.value_length, True),
    ):
        if kv_type is None or kv_type in _FLOAT_TYPES or not head:
            continue
        ok = loadable(head, fa=fa, v_cache=v_cache)
        if kv_type in ok:
            continue
        why = (
            "a quantized V cache needs flash attention, and extra_args set -fa off"
            if v_cache and fa == "off"
            else f"its block of {block_size(kv_type)} elements does not divide the model's head size ({head})"
        )
        raise UserError(
            f"{config.where('models', i, key)}: model {model.name!r}: {key} {kv_type} cannot load: {why}, "
            "so llama-server would exit at load",
            hint=f"set {key} to one of: {', '.join(ok)} (or remove it: f16)",
        )
