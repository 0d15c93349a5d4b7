"""``orchestrator pull REPO[:QUANT_OR_FILE]``, and what ``up`` pulls for ``hf:`` entries."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from orchestrator.config.model_paths import HF_PREFIX, HfSource, parse_hf_source
from orchestrator.errors import UserError

if TYPE_CHECKING:
    from orchestrator.config.schema import Config
    from orchestrator.hub.cache import Pulled

_SAID = {"downloading": "downloading", "cached": "already here", "verified": "sha256 ok"}


def source_of(spec: str) -> HfSource:
    """``spec`` (``REPO[:QUANT_OR_FILE][@REVISION]``, ``hf:`` optional) as an ``HfSource``.

    Raises:
        UserError: not of that form.
    """
    try:
        return parse_hf_source(spec)
    except ValueError as err:
        raise UserError(str(err), hint="e.g. orchestrator pull unsloth/Qwen3.6-35B-A3B-GGUF:UD-Q4_K_XL") from None


def fetch(source: HfSource, console: Console, *, projector: bool = False) -> Pulled:
    """Pull ``source`` into the hub cache, one line per file and huggingface_hub's progress bars."""
    from orchestrator.hub.cache import cache_dir, endpoint
    from orchestrator.hub.pull import pull

    console.print(f"pulling hf:{source.spec} from {endpoint()} into {cache_dir()}", markup=False, soft_wrap=True)
    tell = lambda what, name: console.print(f"  {name}: {_SAID.get(what, what)}", markup=False)  # noqa: E731
    return pull(source, tell, projector=projector)


def run(spec: str, *, projector: bool = False) -> int:
    """``orchestrator pull``: download (or find) the files, then say where they are and how to serve
    them; ``projector``: ``spec`` names the repository's vision projector (models.yaml ``mmproj``)."""
    console = Console(stderr=True, highlight=False)
    source = source_of(spec)
    pulled = fetch(source, console, projector=projector)
    out = Console(highlight=False, soft_wrap=True)
    if projector:
        out.print(f"projector: {pulled.model}", markup=False)
        out.print(f"models.yaml: mmproj: '{HF_PREFIX}{source.spec}' on the model it belongs to", markup=False)
        return 0
    parts = len(pulled.files) - (1 if pulled.head else 0)
    out.print(f"model: {pulled.model}" + (f" (part 1 of {parts})" if parts > 1 else ""), markup=False)
    if pulled.head is not None:
        out.print(f"MTP head: {pulled.head} (served as its speculative.draft)", markup=False)
    out.print(f"models.yaml: - {{name: NAME, path: '{HF_PREFIX}{source.spec}'}}", markup=False)
    return 0


def pull_missing(config: Config, *, offline: bool, console: Console) -> None:
    """Pull each ``hf:`` model that the cache lacks; with ``offline`` refuse, naming the pull command.

    Raises:
        UserError: offline and a model is missing, or a pull fails.
    """
    from orchestrator.hub.cache import cached, pull_command

    for i, model in enumerate(config.models):
        wanted = [("path", model.path, False), ("mmproj", model.mmproj, True)]
        for key, spec, projector in wanted:
            if spec is None or not spec.startswith(HF_PREFIX):
                continue
            source = source_of(spec)
            if cached(source, projector=projector) is not None:
                continue
            if offline:
                raise UserError(
                    f"{config.where('models', i, key)}: model {model.name!r}: {spec} is not downloaded, "
                    "and --offline forbids pulling it",
                    hint=f"run `{pull_command(source, projector=projector)}` first, "
                    "or `orchestrator up` without --offline",
                )
            fetch(source, console, projector=projector)
