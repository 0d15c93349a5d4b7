"""``orchestrator bench``'s group: the sweep by default, and the benchmark tools run from the checkout.

The sweep keeps its old spelling (``orchestrator bench [MODEL] --k ...``): a first argument that is
not a subcommand name goes to ``bench sweep``. The benchmarks behind the figures in our notes
(``policy``, ``agent``, ``proxy``, ``gpu``) are the tools in the repository's ``scripts/``, run with
this Python and the arguments as given, so ``--help`` is the tool's own.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from typer.core import TyperGroup

from orchestrator.errors import UserError

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


class SweepByDefault(TyperGroup):
    """A group whose unknown first argument (a model name, an option) means ``sweep``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # typer's vendored click Context
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
            args = ["sweep", *args]
        return super().parse_args(ctx, args)


def run_tool(name: str, args: list[str]) -> int:
    """Run ``scripts/NAME`` with ``args``; its exit status.

    Raises:
        UserError: this install has no source checkout beside the package.
    """
    tool = SCRIPTS / name
    if not tool.is_file():
        raise UserError(
            f"{tool} not found: the benchmarks run from a source checkout",
            hint="clone the repository and install it with ./scripts/install.sh",
        )
    argv = ["bash", str(tool)] if tool.suffix == ".sh" else [sys.executable, str(tool)]
    try:
        return subprocess.run([*argv, *args], check=False).returncode
    except KeyboardInterrupt:
        return 130
