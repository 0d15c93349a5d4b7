"""Which files of a repository a ``QUANT_OR_FILE`` selector means. Pure: names and sizes in,
a ``Selection`` or a ``UserError`` listing what there is out.

A GGUF repository holds one file per quant (``Model-UD-Q4_K_XL.gguf``), or split parts
(``Q8_0/Model-Q8_0-00001-of-00002.gguf``; llama.cpp loads every part from part 1), vision
projectors (``mmproj-*``, never a model here) and sometimes an MTP/NextN head in its own file
(``Model-MTP.gguf``) that drafts for every quant of the trunk. A selection is the model's files
(all its parts) plus that head, when the repository has one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.errors import UserError

_SPLIT = re.compile(r"^(?P<prefix>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
_QUANT = re.compile(
    r"(?i)[-_.]((?:UD-)?(?:I?Q\d+(?:_[A-Z0-9]+)*|BF16|F16|F32|MXFP4(?:_MOE)?|TQ\d_\d))$",
)
_HEAD = re.compile(r"(?i)(?:^|[-_.])(mtp|nextn)(?=[-_.]|$)")


@dataclass(frozen=True)
class RepoFile:
    """One file of a repository: its path in the repo, size, and the hub's sha256 (LFS files)."""

    name: str
    size: int | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class Selection:
    """The files to fetch: the model's (part 1 first) and its separate MTP head, if any."""

    model: list[RepoFile]
    head: RepoFile | None

    @property
    def files(self) -> list[RepoFile]:
        return [*self.model, *([self.head] if self.head else [])]


def _base(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def _stem(name: str) -> str:
    """The file's name without folder, split suffix and ``.gguf``."""
    base = _base(name)
    match = _SPLIT.match(base)
    return match["prefix"] if match else re.sub(r"(?i)\.gguf$", "", base)


def quant_of(name: str) -> str | None:
    """``UD-Q4_K_XL`` for ``Model-UD-Q4_K_XL.gguf`` (or its split parts); None when the name has none."""
    match = _QUANT.search(_stem(name))
    return match.group(1).upper() if match else None


def _groups(files: list[RepoFile]) -> tuple[dict[str, list[RepoFile]], list[RepoFile]]:
    """(model file groups by folder + stem, part 1 first; MTP head files)."""
    models: dict[str, list[RepoFile]] = {}
    heads: list[RepoFile] = []
    for f in sorted(files, key=lambda f: f.name):
        base = _base(f.name).lower()
        if not base.endswith(".gguf") or "mmproj" in base:
            continue
        if _HEAD.search(_stem(f.name)):
            heads.append(f)
            continue
        folder = f.name.rsplit("/", 1)[0] if "/" in f.name else ""
        models.setdefault(f"{folder}/{_stem(f.name)}", []).append(f)
    return models, heads


def _complete(group: list[RepoFile]) -> list[RepoFile]:
    """A group's files, checked: a split model must have every part."""
    match = _SPLIT.match(_base(group[0].name))
    if match is None:
        return group[:1]
    count = int(match["count"])
    if len(group) != count:
        raise UserError(
            f"{_stem(group[0].name)} is split into {count} parts but the repository has {len(group)} of them",
            hint="pick another quant; the repository is incomplete",
        )
    return group


def _key(name: str) -> str:
    return re.sub(r"[-_.]", "", _HEAD.sub("", _stem(name)).lower())


def _head_for(model: RepoFile, heads: list[RepoFile]) -> RepoFile | None:
    """The MTP head for ``model``: the one whose name (without ``MTP``) starts the model's; the
    only head when the repository has exactly one."""
    matching = [h for h in heads if _key(h.name) and _key(model.name).startswith(_key(h.name))]
    if matching:
        return max(matching, key=lambda h: len(_key(h.name)))
    return heads[0] if len(heads) == 1 else None


def available(files: list[RepoFile]) -> list[str]:
    """What a person can ask for: each model's quant, or its file name when it has none."""
    models, _ = _groups(files)
    return sorted({quant_of(g[0].name) or g[0].name for g in models.values()})


def select(files: list[RepoFile], selector: str | None, repo: str) -> Selection:
    """The files ``selector`` means in ``repo``'s ``files`` (see the module docstring).

    ``selector``: a quant (``UD-Q4_K_XL``, any case), a file in the repository (any split part
    stands for all), or None when the repository holds exactly one model.

    Raises:
        UserError: no such quant or file (listing those there are), or several models match.
    """
    models, heads = _groups(files)
    if not models:
        raise UserError(f"{repo} has no GGUF model file", hint="pick a repository that ships .gguf files")
    if selector is None:
        chosen = list(models.values())
    elif selector.lower().endswith(".gguf"):
        want = selector.lower()
        chosen = [g for g in models.values() if any(f.name.lower() == want or _base(f.name).lower() == want for f in g)]
    else:
        chosen = [g for g in models.values() if (quant_of(g[0].name) or "").lower() == selector.lower()]
    there = ", ".join(available(files))
    if not chosen:
        raise UserError(
            f"{repo} has no {'file' if selector and selector.lower().endswith('.gguf') else 'quant'} {selector!r}; "
            f"there are: {there}",
            hint=f"orchestrator pull {repo}:{available(files)[0]}",
        )
    if len(chosen) > 1:
        names = ", ".join(g[0].name for g in chosen)
        raise UserError(
            f"{repo}{':' + selector if selector else ''} matches {len(chosen)} models ({names})",
            hint=f"name a quant or a file: orchestrator pull {repo}:QUANT (there are: {there})",
        )
    model = _complete(chosen[0])
    return Selection(model=model, head=_head_for(model[0], heads))


# A projector's precision, most preferred first when the repository has several: full precision
# keeps what the vision tower saw (projectors are small, a few hundred MB).
_PROJECTOR_ORDER = ("F16", "BF16", "F32", "Q8_0")


def select_projector(files: list[RepoFile], selector: str | None, repo: str) -> Selection:
    """The vision projector (``mmproj-*.gguf``) ``selector`` means in ``repo``: a file of the
    repository, a precision (``F16``), or None for the repository's own (F16, else BF16, F32,
    Q8_0, else the first by name). The selection's ``model`` is that one file.

    Raises:
        UserError: the repository has no projector, or none matching ``selector`` (listing them).
    """
    projectors = sorted(
        (f for f in files if _base(f.name).lower().endswith(".gguf") and "mmproj" in _base(f.name).lower()),
        key=lambda f: f.name,
    )
    if not projectors:
        raise UserError(f"{repo} has no vision projector (mmproj-*.gguf)", hint="point mmproj at a file instead")
    names = ", ".join(f.name for f in projectors)
    if selector is None:
        rank = {q: i for i, q in enumerate(_PROJECTOR_ORDER)}
        chosen = min(projectors, key=lambda f: rank.get(quant_of(f.name) or "", len(rank)))
    else:
        want = selector.lower()
        matching = [
            f for f in projectors if want in (f.name.lower(), _base(f.name).lower(), (quant_of(f.name) or "").lower())
        ]
        if not matching:
            raise UserError(f"{repo} has no projector {selector!r}; there are: {names}", hint=f"mmproj: hf:{repo}")
        chosen = matching[0]
    return Selection(model=[chosen], head=None)
