"""Where a models.yaml path points: ``~``, relative paths, split models; the builtin model names.

``builtin:`` names are only names here: the launch layer (``orchestrator.launch.files``) turns
them into the generated demo GGUF.
"""

from __future__ import annotations

import re
from pathlib import Path

#: ``path:`` values that name a model the orchestrator generates itself.
BUILTIN_MODELS = ("builtin:tiny-mtp",)

#: ``<prefix>-00001-of-00003.gguf``: llama.cpp's split naming (``llama_split_path`` in
#: src/llama.cpp); ``-m`` with part 1 loads every part (src/llama-model-loader.cpp).
SPLIT_RE = re.compile(r"^(?P<prefix>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$")


def resolve_file(text: str, config_dir: Path) -> Path:
    """Resolve a models.yaml file path (not checked for existence).

    ``~`` expands; relative paths resolve against ``config_dir`` (the YAML's directory); any
    split part maps to part 1 (``-00001-of-0000N.gguf``), which llama.cpp needs in ``-m``;
    ``model.gguf`` that exists only as ``model-00001-of-0000N.gguf`` maps to that part.
    """
    path = Path(text).expanduser()
    if not path.is_absolute():
        path = config_dir / path
    match = SPLIT_RE.match(path.name)
    if match and match["part"] != "00001":
        path = path.with_name(f"{match['prefix']}-00001-of-{match['count']}.gguf")
    elif not match and not path.exists() and path.suffix == ".gguf":
        parts = sorted(path.parent.glob(f"{path.stem}-00001-of-*.gguf")) if path.parent.is_dir() else []
        if len(parts) == 1:
            path = parts[0]
    return path
