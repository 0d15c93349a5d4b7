"""Bytes of weights a decode step reads, from a GGUF's tensor infos: the memory-bandwidth bound.

Decoding one token reads every trunk weight once, except that token_embd gives one row and an
MoE layer reads only the routed experts (``expert_used_count`` of ``expert_count`` slices of each
``*_exps`` tensor). A verification batch of ``b`` tokens reads each layer's experts that any of
them picked: with independent routing, ``n * (1 - (1 - used/n)^b)`` distinct experts of ``n``.
A draft step of the NextN/MTP head reads its own block (with its routed experts) and the
output matrix. KV cache and recurrent-state reads are left out (small at short contexts), so
the bound is optimistic: ``tok/s <= bandwidth / bytes_per_token``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from orchestrator.models.gguf_header import TensorInfo, read_header


@dataclass(frozen=True)
class Traffic:
    """Weight bytes per step of one model (bytes)."""

    dense_trunk: int  # non-expert trunk weights + output + one embedding row
    expert_slice_trunk: int  # one expert's slice summed over all trunk MoE layers
    dense_head: int  # NextN block non-expert weights + output (+ one embedding row)
    expert_slice_head: int  # one expert's slice of the NextN block
    n_expert: int
    n_expert_used: int

    def distinct_experts(self, batch: int) -> float:
        """Expected distinct experts per layer that ``batch`` tokens route to (independent routing)."""
        if self.n_expert <= 0:
            return 0.0
        return self.n_expert * (1.0 - (1.0 - self.n_expert_used / self.n_expert) ** batch)

    def trunk_step(self, batch: int = 1) -> float:
        """Bytes one trunk forward pass over ``batch`` tokens reads (1: plain decode)."""
        return self.dense_trunk + self.expert_slice_trunk * self.distinct_experts(batch)

    def draft_step(self) -> float:
        """Bytes one NextN/MTP draft step reads."""
        return self.dense_head + self.expert_slice_head * self.distinct_experts(1)

    def per_token(self, k: int, tokens_per_step: float) -> float:
        """Bytes read per decoded token at draft length ``k`` when each step yields
        ``tokens_per_step`` tokens: (verification of k + 1 tokens + k draft steps) / tokens."""
        if k <= 0:
            return self.trunk_step(1)
        return (self.trunk_step(k + 1) + k * self.draft_step()) / max(tokens_per_step, 1e-9)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = asdict(self)
        d["decode_bytes_per_token"] = self.trunk_step(1)
        d["draft_step_bytes"] = self.draft_step()
        return d


def _layer(name: str) -> int | None:
    if not name.startswith("blk."):
        return None
    return int(name.split(".")[1])


def traffic(path: Path) -> Traffic:
    """Read ``path``'s header and add up the bytes each kind of step reads (see the module
    docstring). Raises ``UserError`` as ``read_header`` does."""
    header = read_header(Path(path), keep_string_arrays=())
    arch = header.metadata.get("general.architecture", "")
    block_count = int(header.metadata.get(f"{arch}.block_count", 0))
    nextn = int(header.metadata.get(f"{arch}.nextn_predict_layers", 0))
    n_expert = int(header.metadata.get(f"{arch}.expert_count", 0))
    n_used = int(header.metadata.get(f"{arch}.expert_used_count", 0))
    trunk = block_count - nextn
    sums = {"dense_trunk": 0, "slice_trunk": 0, "dense_head": 0, "slice_head": 0}
    for t in header.tensors:
        _add(sums, t, _layer(t.name), trunk, n_expert)
    return Traffic(
        dense_trunk=sums["dense_trunk"],
        expert_slice_trunk=sums["slice_trunk"],
        dense_head=sums["dense_head"],
        expert_slice_head=sums["slice_head"],
        n_expert=n_expert,
        n_expert_used=n_used,
    )


def _add(sums: dict[str, int], t: TensorInfo, layer: int | None, trunk: int, n_expert: int) -> None:
    nbytes = t.nbytes or 0
    if t.name == "token_embd.weight":
        row = nbytes // max(t.shape[-1], 1)
        sums["dense_trunk"] += row
        sums["dense_head"] += row
    elif t.name == "output.weight":
        sums["dense_trunk"] += nbytes
        sums["dense_head"] += nbytes
    elif layer is None:
        sums["dense_trunk"] += nbytes  # output_norm and other globals
    else:
        part = "trunk" if layer < trunk else "head"
        if "_exps." in t.name and n_expert:
            sums[f"slice_{part}"] += nbytes // n_expert
        else:
            sums[f"dense_{part}"] += nbytes
