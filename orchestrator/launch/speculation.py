"""Whether and how a model drafts: the ``--spec-type`` a models.yaml entry gets from its GGUF's
NextN/MTP head, a separate draft file and ``speculative.type``, and the draft's sampling."""

from __future__ import annotations

from pathlib import Path

from orchestrator.config.schema import Config, ModelConfig, SpeculativeConfig
from orchestrator.config.spec_types import DEFAULT_DRAFT_SAMPLING, drafters
from orchestrator.errors import UserError
from orchestrator.models.facts import ModelFacts


def draft_sampling(s: SpeculativeConfig) -> str | None:
    """``--spec-draft-sampling``'s value: models.yaml's ``speculative.sampling``, else the default."""
    return s.sampling or DEFAULT_DRAFT_SAMPLING


def decide_spec(
    config: Config,
    i: int,
    model: ModelConfig,
    gguf: Path,
    draft: Path | None,
    facts: ModelFacts,
    draft_facts: ModelFacts | None,
) -> tuple[str | None, list[str]]:
    """The ``--spec-type`` value (``draft-mtp``, ``ngram-mod`` or both) or None, plus notes. type
    None (auto) = draft-mtp iff the GGUF has an embedded NextN/MTP head or ``speculative.draft``
    is set; a list with draft-mtp needs that head as draft-mtp alone does."""
    kind = model.speculative.type
    mtp = facts.mtp
    if mtp == "draft-only":
        raise UserError(
            f"{config.where('models', i, 'path')}: model {model.name!r}: {gguf.name} is a NextN-only draft "
            "(MTP head without the trunk), not a model to serve",
            hint="set path to the trunk GGUF and speculative.draft to this file",
        )
    if draft is not None and (draft_facts is None or draft_facts.mtp) not in ("draft-only", "embedded"):
        raise UserError(
            f"{config.where('models', i, 'speculative', 'draft')}: model {model.name!r}: {draft.name} has no "
            "NextN/MTP head, so it cannot draft with --spec-type draft-mtp",
            hint="point speculative.draft at a NextN-only GGUF, or remove it",
        )
    has_head = mtp == "embedded"
    if kind == "none":
        return None, []
    if kind is not None and "draft-mtp" not in drafters(kind):
        return kind, []  # n-gram drafting alone: no head needed
    if kind is not None:
        if not has_head and draft is None:
            why = facts.mtp_message or "nextn_predict_layers = 0"
            raise UserError(
                f"{config.where('models', i, 'speculative', 'type')}: model {model.name!r} asks for draft-mtp "
                f"but {gguf} has no NextN/MTP head ({why}) and no speculative.draft is set",
                hint="use a GGUF with the MTP head embedded, set speculative.draft to a NextN-only GGUF, "
                "or set speculative.type: none",
            )
        return kind, []
    if has_head or draft is not None:
        return "draft-mtp", []
    return None, [f"speculation off: {gguf.name} has no NextN/MTP head"]
