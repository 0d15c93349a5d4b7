"""``models_dirs``: every GGUF found in the listed folders becomes an on-demand model.

Rules (each GGUF's header is read once per file version; tensor data never):

- the model is named after its file (``Qwen3.6-35B-A3B-Q4_K_M.gguf`` -> ``Qwen3.6-35B-A3B-Q4_K_M``;
  characters a model id may not hold become ``-``); a split model counts once, under the name
  before ``-00001-of-0000N`` (only part 1 is listed, llama.cpp loads the rest);
- vision projectors (architecture ``clip``, or ``mmproj`` in the name) are not models;
- an MTP/NextN head shipped in its own file (``ModelFacts.mtp == "draft-only"``) is paired with
  the base model in the same folder whose name it extends (``Foo-Q4_K_M.gguf`` + ``Foo-MTP.gguf``),
  and served as that model's ``speculative.draft``; an unpaired one is skipped with a note;
- files the pinned llama.cpp cannot load (fork architectures, unreadable headers) are skipped
  with a note;
- the first file wins a name; an entry in ``models`` with the same name (or alias) wins over
  every discovered one.

Folders are searched recursively and symlinks to files are followed (a Hugging Face cache keeps
``snapshots/<rev>/<file>.gguf`` links to its blobs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.config.model_paths import SPLIT_RE, resolve_file
from orchestrator.config.schema import Config, ModelConfig, SpeculativeConfig
from orchestrator.errors import UserError
from orchestrator.models.facts import read_model_facts

if TYPE_CHECKING:
    from orchestrator.models.facts import ModelFacts

_BAD_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_HEAD_WORDS = re.compile(r"(?i)[-_.]?(mtp|nextn|draft|head)(?=[-_.]|$)")
_FACTS: dict[tuple[str, int, int], ModelFacts | str] = {}  # (path, size, mtime_ns) -> facts or why not


@dataclass(frozen=True)
class Found:
    """A servable GGUF: its model name, file (part 1 for split models) and separate MTP head, if any."""

    name: str
    path: Path
    draft: Path | None = None


def model_name(path: Path) -> str:
    """The model id for a GGUF file: its name without ``.gguf`` and split suffix, made id-safe."""
    match = SPLIT_RE.match(path.name)
    stem = match["prefix"] if match else path.name.removesuffix(".gguf").removesuffix(".GGUF")
    name = _BAD_CHARS.sub("-", stem).strip("-._")
    return name or "model"


def _facts(path: Path) -> ModelFacts | str:
    try:
        st = path.stat()
    except OSError as err:
        return f"cannot read it: {err}"
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _FACTS:
        try:
            _FACTS[key] = read_model_facts(path)
        except UserError as err:
            _FACTS[key] = str(err)
    return _FACTS[key]


def _candidates(folder: Path) -> list[Path]:
    files = []
    for path in sorted(folder.rglob("*")):
        if not path.name.lower().endswith(".gguf") or not path.is_file():
            continue
        match = SPLIT_RE.match(path.name)
        if match and match["part"] != "00001":
            continue  # split parts count once, under part 1
        files.append(path)
    return files


def scan(folders: list[Path]) -> tuple[list[Found], list[str]]:
    """The servable GGUFs in ``folders`` (see the module), and one note per file skipped."""
    found: list[Found] = []
    notes: list[str] = []
    for folder in folders:
        if not folder.is_dir():
            notes.append(f"{folder}: not a folder; nothing found there")
            continue
        bases: list[Path] = []
        heads: list[Path] = []
        for path in _candidates(folder):
            facts = _facts(path)
            if isinstance(facts, str):
                notes.append(f"{path}: skipped: {facts}")
            elif facts.architecture == "clip" or "mmproj" in path.name.lower():
                continue  # a vision projector, not a model
            elif facts.mtp == "unsupported":
                notes.append(f"{path}: skipped: {facts.mtp_message}")
            elif facts.mtp == "draft-only":
                heads.append(path)
            else:
                bases.append(path)
        drafts = _pair(bases, heads, notes)
        found += [Found(model_name(p), p, drafts.get(p)) for p in bases]
    return found, notes


def _key(path: Path) -> str:
    return re.sub(r"[-_.]", "", _HEAD_WORDS.sub("", model_name(path)).lower())


def _pair(bases: list[Path], heads: list[Path], notes: list[str]) -> dict[Path, Path]:
    """Each MTP head file to the base model in its folder whose name (without the head words)
    starts with the head's name; the longest such name wins."""
    pairs: dict[Path, Path] = {}
    for head in heads:
        key = _key(head)
        near = [b for b in bases if b.parent == head.parent and key and _key(b).startswith(key) and b not in pairs]
        if not near:
            notes.append(f"{head}: skipped: an MTP head with no base model of a matching name beside it")
            continue
        pairs[min(near, key=lambda b: len(_key(b)))] = head
    return pairs


def expand(config: Config) -> tuple[Config, list[str]]:
    """``config`` plus one on-demand model per GGUF found in ``config.models_dirs``.

    Returns:
        the expanded config (the same object when there is nothing to add) and notes for people
        (files skipped, names taken).
    """
    if not config.models_dirs:
        return config, []
    found, notes = scan([resolve_file(d, config.config_dir) for d in config.models_dirs])
    taken = {n for m in config.models for n in (m.name, *m.aliases)}
    extra = []
    for item in found:
        if item.name in taken:
            notes.append(f"{item.path}: not added: the name {item.name!r} is already a model")
            continue
        taken.add(item.name)
        spec = SpeculativeConfig(draft=str(item.draft)) if item.draft else SpeculativeConfig()
        extra.append(ModelConfig(name=item.name, path=str(item.path), load="on_demand", speculative=spec))
    if not extra:
        return config, notes
    return config.model_copy(update={"models": [*config.models, *extra]}), notes
