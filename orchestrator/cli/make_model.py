"""``orchestrator make-tiny-model``: write the tiny MTP model and say how to serve it."""

from __future__ import annotations

import time
from pathlib import Path

from orchestrator.errors import UserError
from orchestrator.models.tiny import draft_path, write_tiny_model


def run(out: Path, *, mode: str = "echo", q: float = 0.0, seed: int = 0, variant: str = "embedded") -> int:
    """``orchestrator make-tiny-model OUT``: write the model, print what was written. Returns 0."""
    if Path(out).is_dir():
        raise UserError(f"{out} is a directory", hint=f"give a file name, e.g. {Path(out) / 'tiny.gguf'}")
    if not Path(out).parent.is_dir():
        raise UserError(f"{Path(out).parent} does not exist", hint="create the folder first or pick another path")
    t0 = time.monotonic()
    write_tiny_model(out, mode=mode, q=q, seed=seed, variant=variant)
    written = [Path(out)] + ([draft_path(out)] if variant == "separate" else [])
    for p in written:
        print(f"wrote {p} ({p.stat().st_size / 1e6:.1f} MB)")
    extra = ["-md", str(draft_path(out))] if variant == "separate" else []
    hint = " ".join(["llama-server", "-m", str(out), *extra, "--spec-type", "draft-mtp", "--spec-draft-n-max", "3"])
    print(
        f"mode {mode}, q {q}, seed {seed}, variant {variant}; {time.monotonic() - t0:.1f} s. Serve it with:\n  {hint}"
    )
    return 0
