"""Types of the ``speculative`` keys of models.yaml that are not plain numbers: the drafter
list (``type``) and the n-gram drafter's settings (``ngram_mod``).

The pin's ``--spec-type`` takes a comma-separated list (common/arg.cpp); with several drafters
on, common/speculative.cpp asks the n-gram ones first and the MTP head only when they have no
draft, so ``[draft-mtp, ngram-mod]`` drafts from the context where the output repeats it and
from the head elsewhere.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

#: Drafters the plan may launch, in the order ``--spec-type`` lists them.
DRAFTERS = ("draft-mtp", "ngram-mod")
_ALIASES = {"mtp": "draft-mtp", "draft_mtp": "draft-mtp", "draft-mtp": "draft-mtp", "ngram-mod": "ngram-mod"}
_ALIASES["ngram_mod"] = "ngram-mod"


def normalise_spec_type(value: Any) -> Any:
    """``speculative.type`` as one string: ``none``, a drafter, or drafters joined by commas in
    ``DRAFTERS`` order. Accepts a list, a comma-separated string and the fork spelling ``mtp``."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(x, str) for x in items):
        return value  # the type check below names what is wrong
    names = [x.strip().lower() for x in items]
    if names == ["none"]:
        return "none"
    unknown = [x for x in names if x not in _ALIASES]
    if unknown:
        # located at the field itself: this validator already runs at ``speculative.type``
        near = difflib.get_close_matches(unknown[0], [*_ALIASES, "none"], n=1)
        guess = f" (did you mean {_ALIASES.get(near[0], near[0])!r}?)" if near else ""
        raise ValueError(f"unknown drafter {unknown[0]!r}{guess}")
    wanted = {_ALIASES[x] for x in names}
    return ",".join(d for d in DRAFTERS if d in wanted)


SpecType = Annotated[
    str | None,
    BeforeValidator(normalise_spec_type),
    WithJsonSchema(
        {
            "anyOf": [
                {"enum": ["draft-mtp", "mtp", "ngram-mod", "none", "draft-mtp,ngram-mod"], "type": "string"},
                {"items": {"enum": ["draft-mtp", "mtp", "ngram-mod"], "type": "string"}, "type": "array"},
                {"type": "null"},
            ],
            "description": "draft-mtp (alias: mtp), ngram-mod, a list of both ([draft-mtp, ngram-mod]: n-gram "
            "drafts where the context repeats, MTP elsewhere), none, or null/absent = auto: draft-mtp iff the "
            "GGUF has a NextN/MTP head or `draft` is set",
        }
    ),
]


#: ``speculative.sampling`` when models.yaml leaves it unset; None renders no flag (llama-server's
#: own default, greedy). Chosen from ``orchestrator bench --draft-sampling`` (docs/draft-length.md).
DEFAULT_DRAFT_SAMPLING: str | None = None


def drafters(spec_type: str | None) -> tuple[str, ...]:
    """The drafters of a normalised ``speculative.type`` (none and auto: empty)."""
    return tuple(spec_type.split(",")) if spec_type and spec_type != "none" else ()


_Count = Annotated[int, Field(strict=True, ge=0, le=1024)]


class NgramModConfig(BaseModel):
    """The ``ngram-mod`` drafter (``--spec-ngram-mod-*``; defaults are the pin's)."""

    model_config = ConfigDict(extra="forbid")

    n_match: Annotated[int, Field(strict=True, ge=1, le=1024)] = Field(
        24, description="tokens of context an n-gram lookup matches (--spec-ngram-mod-n-match)"
    )
    n_min: _Count = Field(48, description="fewest tokens an n-gram draft must have (--spec-ngram-mod-n-min)")
    n_max: _Count = Field(64, description="most tokens an n-gram draft has (--spec-ngram-mod-n-max)")
