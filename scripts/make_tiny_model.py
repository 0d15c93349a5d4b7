#!/usr/bin/env python3
"""Write the tiny qwen35moe MTP test model: the same as ``orchestrator make-tiny-model``.

Usage: scripts/make_tiny_model.py OUT.gguf [--mode echo|random] [--q 0.1] [--seed 0]
       [--variant embedded|separate|dense]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.cli import make_model
from orchestrator.errors import UserError
from orchestrator.models.tiny import MODES, VARIANTS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="output .gguf path")
    parser.add_argument("--mode", choices=MODES, default="echo")
    parser.add_argument(
        "--q", type=float, default=0.0, help="echo mode: fraction of drafts made wrong (acceptance = 1 - q)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variant", choices=VARIANTS, default="embedded")
    args = parser.parse_args(argv)
    try:
        return make_model.run(args.out, mode=args.mode, q=args.q, seed=args.seed, variant=args.variant)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        if err.hint:
            print(f"  fix: {err.hint}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
