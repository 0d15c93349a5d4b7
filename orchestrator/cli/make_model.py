"""``orchestrator make-tiny-model``: write the tiny MTP model and say how to serve it."""

from __future__ import annotations

import time
from pathlib import Path

from orchestrator.errors import UserError
from orchestrator.models.shaped import disk_usage, write_shaped_model
from orchestrator.models.tiny import draft_path, write_tiny_model
from orchestrator.models.tiny_mmproj import write_tiny_mmproj
from orchestrator.native.build import locate


def _check_out(out: Path, example: str) -> None:
    if Path(out).is_dir():
        raise UserError(f"{out} is a directory", hint=f"give a file name, e.g. {Path(out) / example}")
    if not Path(out).parent.is_dir():
        raise UserError(f"{Path(out).parent} does not exist", hint="create the folder first or pick another path")


def run(
    out: Path,
    *,
    mode: str = "echo",
    q: float = 0.0,
    seed: int = 0,
    variant: str = "embedded",
    mmproj: Path | None = None,
) -> int:
    """``orchestrator make-tiny-model OUT [--mmproj PROJ]``: write the model (and a tiny vision
    projector for it), print what was written. Returns 0."""
    _check_out(out, "tiny.gguf")
    if mmproj is not None:
        _check_out(mmproj, "mmproj-tiny.gguf")
    t0 = time.monotonic()
    write_tiny_model(out, mode=mode, q=q, seed=seed, variant=variant)
    if mmproj is not None:
        write_tiny_mmproj(mmproj, seed=seed)
    written = [Path(out)] + ([draft_path(out)] if variant == "separate" else []) + ([Path(mmproj)] if mmproj else [])
    for p in written:
        print(f"wrote {p} ({p.stat().st_size / 1e6:.1f} MB)")
    extra = ["-md", str(draft_path(out))] if variant == "separate" else []
    extra += ["--mmproj", str(mmproj)] if mmproj is not None else []
    server, note = _server()
    hint = " ".join([server, "-m", str(out), *extra, "--spec-type", "draft-mtp", "--spec-draft-n-max", "3"]) + note
    # a name of its own: the shipped models.yaml already calls its demo model ``tiny`` (an alias)
    entry = f"name: local-{Path(out).stem}, path: {Path(out).resolve()}"
    entry += f", mmproj: {Path(mmproj).resolve()}" if mmproj else ""
    print(
        f"mode {mode}, q {q}, seed {seed}, variant {variant}; {time.monotonic() - t0:.1f} s. Serve it with:\n  {hint}\n"
        f"or behind the endpoint: `- {{{entry}}}` under models: in models.yaml, then `orchestrator up`"
    )
    return 0


def _server() -> tuple[str, str]:
    """The built llama-server's path and a note: ``orchestrator build`` puts none on PATH, so a
    bare ``llama-server`` would not run; before a build, the bare name and how to get one."""
    try:
        return str(locate().server), ""
    except UserError:
        return "llama-server", "\n  (`orchestrator build` first: it builds one; `orchestrator build --show` says where)"


def run_shaped(out: Path, *, shape: str, quant: str, q: float, seed: int, scale: str, profile: str = "plain") -> int:
    """``orchestrator make-tiny-model OUT --shape NAME``: write the shaped model, print its size,
    shape and the time taken. Returns 0."""
    _check_out(out, "shaped.gguf")  # as for the tiny model: a typo in the folder creates no folders
    t0 = time.monotonic()
    sh = write_shaped_model(out, shape=shape, quant=quant, q=q, seed=seed, scale=scale, profile=profile)
    size, used = disk_usage(out)
    print(f"wrote {out}: {size / 1e9:.2f} GB ({used / 1e9:.2f} GB on disk; zero tensors are holes)")
    print(
        f"{sh.name} at scale {scale}, {quant}: {sh.n_layer} trunk layers + {sh.n_nextn} NextN, n_embd {sh.n_embd}, "
        f"{sh.n_expert} experts ({sh.n_expert_used} used), vocab {sh.n_vocab}; "
        + (f"q {q} (acceptance {1 - q:.2f}); " if profile == "plain" else "drafts right by content kind; ")
        + f"{time.monotonic() - t0:.1f} s"
    )
    return 0
