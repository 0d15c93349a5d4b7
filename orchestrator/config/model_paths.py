"""Where a models.yaml entry's GGUF files are: builtin models, ``~``, relative paths, split models."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.config.schema import ModelConfig

#: ``path:`` values that name a model the orchestrator generates itself.
BUILTIN_MODELS = ("builtin:tiny-mtp",)

# llama.cpp's `-m FILE-00001-of-00003.gguf` loads every part; see src/llama-model-loader.cpp.
_SPLIT_RE = re.compile(r"^(?P<prefix>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$")


def resolve_model_path(model: ModelConfig, config_dir: Path) -> Path:
    """Resolve ``model.path`` to a GGUF file (not checked for existence).

    ``builtin:tiny-mtp`` -> ``orchestrator.models.tiny.demo_model()`` (generated on first use);
    ``~`` expands; relative paths resolve against ``config_dir`` (the YAML's directory);
    a split model resolves to its first part (``-00001-of-0000N.gguf``), which llama.cpp
    needs in ``-m``.
    """
    if model.path in BUILTIN_MODELS:
        from orchestrator.models import tiny as tiny_model  # lazy: imports numpy/gguf

        return Path(tiny_model.demo_model())
    return resolve_file(model.path, config_dir)


def resolve_draft_path(model: ModelConfig, config_dir: Path) -> Path | None:
    """Resolve ``model.speculative.draft`` like ``resolve_model_path``; None when unset."""
    if model.speculative.draft is None:
        return None
    return resolve_file(model.speculative.draft, config_dir)


def resolve_file(text: str, config_dir: Path) -> Path:
    """Expand ``~``, anchor relative paths at ``config_dir``, map any split part to part 1."""
    path = Path(text).expanduser()
    if not path.is_absolute():
        path = config_dir / path
    match = _SPLIT_RE.match(path.name)
    if match and match["part"] != "00001":
        path = path.with_name(f"{match['prefix']}-00001-of-{match['count']}.gguf")
    elif not match and not path.exists() and path.suffix == ".gguf":
        # `model.gguf` may be published as model-00001-of-00003.gguf
        parts = sorted(path.parent.glob(f"{path.stem}-00001-of-*.gguf")) if path.parent.is_dir() else []
        if len(parts) == 1:
            path = parts[0]
    return path
