"""Where a models.yaml path points: ``~``, relative paths, split models; the builtin model names;
``hf:`` sources (a Hugging Face repository and the quant or file in it).

``builtin:`` names and ``hf:`` sources are only names here: the launch layer
(``orchestrator.launch.files``) turns them into the generated demo GGUF or the files the hub
cache holds (``orchestrator.hub``).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
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


HF_PREFIX = "hf:"
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
#: a hub page's address: the repository, then optionally /blob|resolve/REVISION/FILE
_WEB = re.compile(
    r"^https?://(?:www\.)?(?:hf\.co|huggingface\.co)/([^/?#]+/[^/?#]+)(?:/(?:blob|resolve)/([^/]+)/([^?#]+))?"
)


@dataclass(frozen=True)
class HfSource:
    """``hf:OWNER/NAME[:QUANT_OR_FILE][@REVISION]``: a Hugging Face model repository, the quant
    (``UD-Q4_K_XL``) or file (``Q8_0/model-Q8_0-00001-of-00002.gguf``) in it (None: the only one),
    and a branch, tag or commit (None: ``main``)."""

    repo: str
    selector: str | None = None
    revision: str | None = None

    @property
    def spec(self) -> str:
        """``REPO[:SELECTOR][@REVISION]``, what ``orchestrator pull`` takes."""
        return (
            self.repo + (f":{self.selector}" if self.selector else "") + (f"@{self.revision}" if self.revision else "")
        )


def parse_hf_source(text: str) -> HfSource:
    """``hf:REPO[:QUANT_OR_FILE][@REVISION]`` (the ``hf:`` prefix optional) as an ``HfSource``.

    Raises:
        ValueError: not of that form (the message says what is wrong).
    """
    body = text.removeprefix(HF_PREFIX).strip()
    web = _WEB.match(body)
    if web:  # a page's address pasted from the browser: say what to write instead
        repo, rev, file = web.group(1), web.group(2), web.group(3)
        spec = repo + (f":{file}" if file else "") + (f"@{rev}" if rev and rev != "main" else "")
        raise ValueError(f"{text!r} is a web address; write the repository id: {spec}")
    revision = None
    if "@" in body:
        body, revision = body.rsplit("@", 1)
        if not revision:
            raise ValueError(f"{text!r}: nothing after '@'; give a branch, tag or commit, or drop the '@'")
    repo, _, selector = body.partition(":")
    if not _REPO.match(repo):
        raise ValueError(f"{text!r}: {repo!r} is not a repository id; write hf:OWNER/NAME[:QUANT_OR_FILE]")
    return HfSource(repo=repo, selector=selector or None, revision=revision)


def check_path(value: str) -> str:
    """A models.yaml ``path``: a known ``builtin:`` name, a well-formed ``hf:`` source, or a file.

    Raises:
        ValueError: an unknown builtin name (with the nearest one) or a malformed ``hf:`` source.
    """
    if value.startswith("builtin:") and value not in BUILTIN_MODELS:
        near = difflib.get_close_matches(value, BUILTIN_MODELS, n=1)
        tip = f"did you mean {near[0]!r}? " if near else ""
        raise ValueError(f"unknown builtin model {value!r}; {tip}known: {', '.join(BUILTIN_MODELS)}")
    if value.startswith(HF_PREFIX):
        parse_hf_source(value)
    return value
