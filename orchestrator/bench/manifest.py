"""The manifest of a bench run (``results.json``): what its numbers depend on: the build, the
GPUs, the host, and the model (a hash of its header plus its size, and its GGUF facts).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import platform
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.models.facts import read_model_facts

if TYPE_CHECKING:
    from orchestrator.launch.spec import InstanceSpec
    from orchestrator.native.build import BuildInfo

HEADER_HASH_BYTES = 32 * 1024 * 1024  # the GGUF header + metadata (tokenizer included) fit in this


def header_sha256(path: Path, limit: int = HEADER_HASH_BYTES) -> str:
    """sha256 of the first ``limit`` bytes of ``path`` (a GGUF's header, metadata and tokenizer)
    plus its size, so identical files match without reading tens of GB."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        h.update(fh.read(limit))
    h.update(str(path.stat().st_size).encode())
    return h.hexdigest()


def _model_facts(path: Path) -> dict[str, Any]:
    try:
        facts = read_model_facts(path)
    except Exception as err:
        return {"error": str(err)}
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(facts).items()}


def manifest(*, build: BuildInfo, gpus: list[Any], gpu_source: str, spec: InstanceSpec) -> dict[str, Any]:
    """What the results depend on: build (commit, patches, backend), GPUs, host, model hash and facts."""
    m = build.manifest
    patches = [p.get("name") if isinstance(p, dict) else p for p in (m.get("patches") or [])]
    gguf = Path(spec.gguf).resolve()
    model: dict[str, Any] = {"path": str(gguf), "size_bytes": gguf.stat().st_size if gguf.exists() else None}
    if gguf.exists():
        model["header_sha256"] = header_sha256(gguf)
        model["header_sha256_bytes"] = HEADER_HASH_BYTES
        model["facts"] = _model_facts(gguf)
    if spec.draft is not None and Path(spec.draft).exists():
        model["draft"] = {"path": str(spec.draft), "header_sha256": header_sha256(Path(spec.draft))}
    return {
        "build": {
            "bin_dir": str(build.bin_dir),
            "upstream_commit": m.get("upstream_commit"),
            "version": m.get("version"),
            "patches": patches,
            "backend": m.get("backend"),
            "cuda_arch": m.get("cuda_arch"),
            "key": m.get("key"),
        },
        "gpus": [_gpu_row(g) for g in gpus],
        "gpu_source": gpu_source,
        "host": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "model": model,
        "argv": list(spec.argv),
    }


def _gpu_row(gpu: Any) -> Any:
    """A GPU as a JSON-ready dict (a dataclass instance), anything else as its string."""
    if dataclasses.is_dataclass(gpu) and not isinstance(gpu, type):
        return dataclasses.asdict(gpu)
    return str(gpu)
