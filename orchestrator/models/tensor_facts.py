"""Facts a model's tensor infos give: bytes per ggml type, routed-expert bytes per block, output rows."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.models.gguf_header import TensorInfo


@dataclass
class TensorTypeShare:
    """How many tensors of one ggml type a model has and how many bytes they take."""

    count: int = 0
    bytes: int = 0


def output_rows(tensors: list[TensorInfo]) -> int:
    """Vocabulary rows of ``output.weight`` (``token_embd.weight`` when the output is tied)."""
    by_name = {t.name: t for t in tensors}
    found = by_name.get("output.weight") or by_name.get("token_embd.weight")
    return found.shape[1] if found is not None and len(found.shape) > 1 else 0


def expert_layer_bytes(tensors: list[TensorInfo], block_count: int) -> tuple[int, ...]:
    """Bytes of the routed expert tensors (``blk.N.ffn_{gate,up,down,gate_up}_exps``) per block:
    what ``--n-cpu-moe N`` keeps in CPU memory for the first N blocks."""
    per = [0] * block_count
    for t in tensors:
        parts = t.name.split(".")
        expert = len(parts) > 2 and parts[0] == "blk" and parts[2].endswith("_exps") and parts[1].isdigit()
        if expert and int(parts[1]) < block_count:
            per[int(parts[1])] += t.nbytes or 0
    return tuple(per) if any(per) else ()


def tensor_types(tensors: list[TensorInfo]) -> dict[str, TensorTypeShare]:
    """Count and bytes per ggml type, largest share first."""
    types: dict[str, TensorTypeShare] = {}
    for t in tensors:
        share = types.setdefault(t.type_name, TensorTypeShare())
        share.count += 1
        share.bytes += t.nbytes or 0
    return dict(sorted(types.items(), key=lambda kv: -kv[1].bytes))
