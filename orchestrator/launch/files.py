"""The GGUF files a models.yaml entry names, checked, and the model facts read from them.

``builtin:`` paths become the generated demo model here (``orchestrator.models.tiny``), ``hf:``
sources the files the hub cache holds (``orchestrator.hub.cache``; nothing is downloaded here:
``orchestrator pull`` and ``up`` do that before planning); the config layer only knows their names.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.config.model_paths import BUILTIN_MODELS, HF_PREFIX, parse_hf_source, resolve_file
from orchestrator.config.schema import Config, ModelConfig
from orchestrator.errors import UserError
from orchestrator.hub.cache import require_cached
from orchestrator.models import tiny
from orchestrator.models.facts import ModelFacts, fork_upstream, read_model_facts


def builtin_model(name: str) -> Path:
    """The GGUF for a ``builtin:`` name (generated on first use; see ``models.tiny.demo_model``).

    Raises:
        UserError: an unknown name, or the model cannot be generated.
    """
    if name not in BUILTIN_MODELS:
        raise UserError(f"unknown builtin model {name!r}", hint=f"known: {', '.join(BUILTIN_MODELS)}")
    return tiny.demo_model()


def resolve_model_path(model: ModelConfig, config_dir: Path) -> Path:
    """``model.path`` as a file (not checked for existence): a builtin model, or
    ``config.model_paths.resolve_file`` (``~``, relative to ``config_dir``, split part 1)."""
    if model.path in BUILTIN_MODELS:
        return builtin_model(model.path)
    if model.path.startswith(HF_PREFIX):
        return require_cached(parse_hf_source(model.path)).model
    return resolve_file(model.path, config_dir)


def resolve_draft_path(model: ModelConfig, config_dir: Path) -> Path | None:
    """``model.speculative.draft`` resolved like ``resolve_model_path``; None when unset. An ``hf:``
    model's separate MTP head (fetched with it) is its draft unless ``speculative.draft`` says otherwise."""
    if model.speculative.draft is None:
        if model.path.startswith(HF_PREFIX):
            return require_cached(parse_hf_source(model.path)).head
        return None
    return resolve_file(model.speculative.draft, config_dir)


def model_files(config: Config, i: int, model: ModelConfig) -> tuple[Path, Path | None]:
    """(GGUF, draft GGUF or None) of ``config.models[i]``, both existing files.

    Raises:
        UserError: a missing file, naming the models.yaml line and key.
    """
    gguf = resolve_model_path(model, config.config_dir)
    if not gguf.is_file():
        what = f"{gguf} is a directory, not a GGUF file" if gguf.is_dir() else f"no such GGUF file {gguf}"
        raise UserError(
            f"{config.where('models', i, 'path')}: model {model.name!r}: {what}",
            hint="fix the path (relative paths start at the models.yaml folder; split models: give part 00001)",
        )
    draft = resolve_draft_path(model, config.config_dir)
    if draft is not None and not draft.is_file():
        raise UserError(
            f"{config.where('models', i, 'speculative', 'draft')}: model {model.name!r}: no such draft GGUF {draft}",
            hint="fix the path or remove speculative.draft (an embedded MTP head needs no draft file)",
        )
    return gguf, draft


def projector_file(config: Config, i: int, model: ModelConfig) -> Path | None:
    """``model.mmproj`` as an existing file (``resolve_file``: ``~``, relative to the models.yaml
    folder), or None when unset.

    Raises:
        UserError: a missing file, naming the models.yaml line and key.
    """
    if model.mmproj is None:
        return None
    if model.mmproj.startswith(HF_PREFIX):
        return require_cached(parse_hf_source(model.mmproj), projector=True).model
    path = resolve_file(model.mmproj, config.config_dir)
    if not path.is_file():
        raise UserError(
            f"{config.where('models', i, 'mmproj')}: model {model.name!r}: no such projector GGUF {path}",
            hint="point mmproj at the model's vision projector (mmproj-*.gguf), or remove it",
        )
    return path


def facts_at(config: Config, i: int, model: ModelConfig, path: Path, key: tuple[str, ...]) -> ModelFacts:
    """``read_model_facts(path)``; a bad GGUF's UserError gets the models.yaml line and key in front."""
    try:
        return read_model_facts(path)
    except UserError as err:
        raise UserError(f"{config.where('models', i, *key)}: model {model.name!r}: {err}", hint=err.hint) from None


def check_not_fork(
    config: Config, i: int, model: ModelConfig, path: Path, facts: ModelFacts, key: tuple[str, ...]
) -> None:
    """Refuse a fork's GGUF (``qwen35moe_mtp``) before launch: the pin cannot load it.

    Raises:
        UserError: naming the models.yaml line and key, the architecture and the upstream one.
    """
    upstream = fork_upstream(facts.architecture)
    if facts.mtp == "unsupported":
        upstream = upstream or facts.architecture
        arch = facts.architecture
        raise UserError(
            f"{config.where('models', i, *key)}: model {model.name!r}: {path} has architecture {arch!r}, written by "
            f"a llama.cpp fork; the pinned llama.cpp knows {upstream!r} (with --spec-type draft-mtp) and cannot "
            "load it",
            hint=f"use an upstream GGUF (architecture {upstream!r}, MTP head embedded; `orchestrator inspect FILE` "
            "shows it) or re-convert the original weights with the pinned convert_hf_to_gguf.py",
        )


def check_projector(config: Config, i: int, model: ModelConfig, path: Path, facts: ModelFacts) -> list[str]:
    """Refuse an ``mmproj`` that is not a projector GGUF (llama-server would exit at load); a note
    when the width it says it projects to is not the model's (``clip.vision.projection_dim`` is not
    what every projector type checks, so it is not refused)."""
    projector = facts_at(config, i, model, path, ("mmproj",)).projector
    if projector is None:
        raise UserError(
            f"{config.where('models', i, 'mmproj')}: model {model.name!r}: {path.name} is not a projector GGUF "
            "(its architecture is not clip)",
            hint="point mmproj at the model's mmproj-*.gguf; `orchestrator inspect FILE` shows what a file is",
        )
    width = projector.get("projection_dim")
    if width and facts.embedding_length and width != facts.embedding_length:
        return [
            f"mmproj {path.name} projects to width {width}, the model's is {facts.embedding_length}: check the pair"
        ]
    return []
